#!/usr/bin/env node
// rhea (pure JavaScript) draining a receiver's credit, for tests/test_broker_drain_interop.py: it grants CREDIT with
// the drain flag set (one flow), accepts what comes, and prints one line of JSON when the sender answers the drain
// (rhea's 'receiver_drained' event, raised only by a flow with drain set from the sender), or when it times out:
// {"received": N, "drained": true|false}.
//
// usage: node rhea_drain.js --port PORT --address ADDRESS --credit N [--host 127.0.0.1] [--timeout SECONDS]
'use strict';

const rhea = require('rhea');

function option(name, fallback) {
    const index = process.argv.indexOf('--' + name);
    return index >= 0 && index + 1 < process.argv.length ? process.argv[index + 1] : fallback;
}

let received = 0;
const container = rhea.create_container({id: 'rhea-drain'});

function report(drained, connection) {
    console.log(JSON.stringify({received: received, drained: drained}));
    if (connection) connection.close();
    process.exitCode = drained ? 0 : 1;
}

const timer = setTimeout(function () {
    report(false, null);
    process.exit(1);
}, Number(option('timeout', '30')) * 1000);

container.on('receiver_open', function (context) {
    context.receiver.add_credit(Number(option('credit', '1')));
    context.receiver.drain_credit();
});
container.on('message', function (context) {
    received += 1;
    context.delivery.accept();
});
container.on('receiver_drained', function (context) {
    clearTimeout(timer);
    report(true, context.connection);
});
container.on('error', function (context) {
    console.log(JSON.stringify({error: String(context.error)}));
});
const connection = container.connect({host: option('host', '127.0.0.1'), port: Number(option('port', '5672')),
                                      reconnect: false});
connection.open_receiver({source: option('address', 'q'), credit_window: 0, autoaccept: false});
