#!/usr/bin/env node
// rhea (pure JavaScript) receiving large messages whole, for tests/test_streaming_interop.py: one line of JSON per
// message, {"size": N, "sha256": H, "sections": S, "subject": T}, the body's data sections joined (S of them:
// rhea keeps every data section of a message, where proton keeps the last one).
//
// usage: node rhea_stream_receive.js --port PORT --address ADDRESS --count N [--host 127.0.0.1] [--timeout SECONDS]
'use strict';

const crypto = require('crypto');
const rhea = require('rhea');

function option(name, fallback) {
    const index = process.argv.indexOf('--' + name);
    return index >= 0 && index + 1 < process.argv.length ? process.argv[index + 1] : fallback;
}

const count = Number(option('count', '1'));
const timer = setTimeout(function () {
    console.log(JSON.stringify({error: 'timed out'}));
    process.exit(1);
}, Number(option('timeout', '120')) * 1000);

function parts(body) {
    if (body && body.content !== undefined) {
        return Array.isArray(body.content) ? body.content : [body.content];
    }
    if (Buffer.isBuffer(body)) return [body];
    return [Buffer.from(String(body))];
}

const container = rhea.create_container({id: 'rhea-stream-receive'});
let received = 0;
container.on('message', function (context) {
    const pieces = parts(context.message.body);
    const hash = crypto.createHash('sha256');
    let size = 0;
    for (const piece of pieces) {
        hash.update(piece);
        size += piece.length;
    }
    console.log(JSON.stringify({
        size: size, sha256: hash.digest('hex'), sections: pieces.length, subject: context.message.subject,
    }));
    context.delivery.accept();
    received += 1;
    if (received >= count) {
        clearTimeout(timer);
        context.connection.close();
    }
});
container.on('error', function (context) {
    console.log(JSON.stringify({error: String(context.error)}));
});
const connection = container.connect({host: option('host', '127.0.0.1'), port: Number(option('port', '5672')),
                                      reconnect: false});
connection.open_receiver({source: option('address', 'q'), credit_window: 1});
