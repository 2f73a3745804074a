#!/usr/bin/env node
// rhea (pure JavaScript) as a client of our embedded broker: the "rhea client" column of the interop matrix
// (tests/test_interop_matrix.py). See README.md next to this file.
//
// usage: node rhea_client.js --port PORT --scenario NAME [--host 127.0.0.1] [--count N] [--user U --password P]
//                            [--queue PREFIX] [--timeout SECONDS] [--websocket PATH]
//
// With --websocket PATH it connects over WebSocket (rhea's websocket_connect with the npm package `ws`,
// subprotocol "amqp") to ws://HOST:PORT/PATH instead of plain TCP.
//
// Runs one scenario and prints one line of JSON: {"ok": true|false, "detail": "..."} (exit status 0 either way;
// a crash is a non-zero exit). Scenarios: at-least-once, at-most-once, reject, release, modify, large, drain,
// dynamic, request-reply (the responder is the test, on our client), sasl-plain, error.
'use strict';

const crypto = require('crypto');
const rhea = require('rhea');

function option(name, fallback) {
    const index = process.argv.indexOf('--' + name);
    return index >= 0 && index + 1 < process.argv.length ? process.argv[index + 1] : fallback;
}

const host = option('host', '127.0.0.1');
const port = Number(option('port', '5672'));
const scenario = option('scenario', 'at-least-once');
const count = Number(option('count', '10000'));
const user = option('user', undefined);
const password = option('password', undefined);
const prefix = option('queue', 'rhea-' + scenario);
const timeoutSeconds = Number(option('timeout', '60'));
const websocketPath = option('websocket', undefined);

function report(ok, detail, extra) {
    console.log(JSON.stringify(Object.assign({ok: ok, detail: detail}, extra || {})));
    process.exit(0);
}

const timer = setTimeout(function () {
    report(false, 'rhea client: scenario ' + scenario + ' timed out after ' + timeoutSeconds + ' s');
}, timeoutSeconds * 1000);

function describe(error) {
    if (!error) return String(error);
    const condition = error.condition || (error.value && error.value.condition) || '';
    const description = error.description || error.message || '';
    return (condition ? condition + ': ' : '') + description;
}

function connect(extra) {
    const container = rhea.create_container({id: 'rhea-interop-client'});
    container.on('error', function () {});
    return new Promise(function (resolve, reject) {
        const options = {host: host, port: port, reconnect: false};
        if (websocketPath !== undefined) {
            const url = 'ws://' + host + ':' + port + websocketPath;
            options.connection_details = container.websocket_connect(require('ws'))(url, ['amqp'], {});
        }
        const connection = container.connect(Object.assign(options, extra || {}));
        connection.on('connection_open', function () { resolve(connection); });
        connection.on('connection_error', function (context) {
            const error = context.error || context.connection.error || context.connection.transport_error;
            reject(new Error('connection error: ' + describe(error)));
        });
        connection.on('disconnected', function (context) {
            reject(new Error('disconnected: ' + describe(context.error || context.connection.error)));
        });
        connection.on('error', function (context) {
            reject(new Error('error: ' + describe(context.connection.error)));
        });
    });
}

function sleep(ms) {
    return new Promise(function (resolve) { setTimeout(resolve, ms); });
}

// Send messages (a function of the index) and resolve with the outcomes' names once all are settled; pre-settled
// messages (snd_settle_mode 1) resolve once all were handed to the socket.
function sendAll(connection, address, n, make, options) {
    return new Promise(function (resolve, reject) {
        const sender = connection.open_sender(Object.assign({target: {address: address}}, options || {}));
        const outcomes = {};
        let sent = 0;
        let settled = 0;
        const presettled = options && options.snd_settle_mode === 1;
        function outcome(name) {
            return function () {
                outcomes[name] = (outcomes[name] || 0) + 1;
                if (++settled === n) resolve({outcomes: outcomes, sender: sender});
            };
        }
        sender.on('accepted', outcome('accepted'));
        sender.on('rejected', outcome('rejected'));
        sender.on('released', outcome('released'));
        sender.on('modified', outcome('modified'));
        sender.on('sender_error', function (context) {
            reject(new Error('sender error: ' + describe(context.sender.error)));
        });
        sender.on('sendable', function () {
            while (sent < n && sender.sendable()) {
                sender.send(make(sent++));
            }
            if (presettled && sent === n) {
                setImmediate(function () { resolve({outcomes: {presettled: n}, sender: sender}); });
            }
        });
    });
}

// Receive until `until(messages)` is true or `quietMs` pass without a message; resolve with the messages.
function receive(connection, options, onMessage, until, quietMs) {
    return new Promise(function (resolve, reject) {
        const receiver = connection.open_receiver(options);
        const messages = [];
        let quiet = null;
        function rearm() {
            if (quiet) clearTimeout(quiet);
            quiet = setTimeout(function () { resolve({messages: messages, receiver: receiver}); }, quietMs);
        }
        receiver.on('receiver_open', rearm);
        receiver.on('message', function (context) {
            messages.push(context.message);
            if (onMessage) onMessage(context, messages.length);
            if (until && until(messages)) {
                clearTimeout(quiet);
                resolve({messages: messages, receiver: receiver});
            } else {
                rearm();
            }
        });
        receiver.on('receiver_error', function (context) {
            reject(new Error('receiver error: ' + describe(context.receiver.error)));
        });
    });
}

function countBodies(messages) {
    const seen = new Map();
    for (const message of messages) seen.set(message.body, (seen.get(message.body) || 0) + 1);
    let duplicates = 0;
    for (const value of seen.values()) if (value > 1) duplicates += value - 1;
    return {distinct: seen.size, duplicates: duplicates};
}

const scenarios = {
    'at-least-once': async function () {
        const connection = await connect();
        const address = prefix + '-q';
        const sent = await sendAll(connection, address, count, function (i) { return {body: i}; });
        if (sent.outcomes.accepted !== count) return report(false, 'outcomes ' + JSON.stringify(sent.outcomes));
        const got = await receive(connection, {source: {address: address}, credit_window: 500}, null,
            function (messages) { return messages.length >= count; }, 5000);
        await sleep(300); // anything beyond `count` would be a duplicate
        const counted = countBodies(got.messages.concat());
        const ok = got.messages.length === count && counted.distinct === count && counted.duplicates === 0;
        connection.close();
        report(ok, 'rhea sent ' + count + ' (all accepted) and received ' + got.messages.length + ' (' +
            counted.distinct + ' distinct, ' + counted.duplicates + ' duplicates)');
    },

    'at-most-once': async function () {
        const connection = await connect();
        const address = prefix + '-q';
        await sendAll(connection, address, count, function (i) { return {body: i}; }, {snd_settle_mode: 1});
        let unsettled = 0;
        const got = await receive(connection, {source: {address: address}, credit_window: 500, snd_settle_mode: 1},
            function (context) { if (!context.delivery.remote_settled) unsettled++; },
            function (messages) { return messages.length >= count; }, 3000);
        const counted = countBodies(got.messages);
        const ok = got.messages.length === count && counted.duplicates === 0 && unsettled === 0;
        connection.close();
        report(ok, 'rhea sent ' + count + ' pre-settled and received ' + got.messages.length + ' (' +
            counted.duplicates + ' duplicates, ' + unsettled + ' not pre-settled)');
    },

    'outcome': async function (kind) {
        const connection = await connect();
        const address = prefix + '-q';
        await sendAll(connection, address, 1, function () { return {body: 'victim', message_id: 'victim'}; });
        let settledOne = false;
        let sentinelSent = false;
        const got = await receive(connection, {source: {address: address}, credit_window: 10, autoaccept: false},
            function (context) {
                if (!settledOne) {
                    settledOne = true;
                    if (kind === 'reject') {
                        context.delivery.reject({condition: 'amqp:precondition-failed', description: 'rhea rejects'});
                    } else if (kind === 'release') {
                        context.delivery.release();
                    } else {
                        context.delivery.modified({delivery_failed: true});
                    }
                    if (!sentinelSent) {
                        sentinelSent = true;
                        sendAll(connection, address, 1, function () { return {body: 'sentinel'}; });
                    }
                } else {
                    context.delivery.accept();
                }
            },
            function (messages) {
                const bodies = messages.map(function (m) { return m.body; });
                return kind !== 'reject' && bodies.indexOf('sentinel') >= 0 && bodies.lastIndexOf('victim') > 0;
            }, kind === 'reject' ? 1500 : 5000);
        const bodies = got.messages.map(function (m) { return m.body; });
        const again = got.messages.slice(1).filter(function (m) { return m.body === 'victim'; });
        let ok;
        let detail = 'received ' + JSON.stringify(bodies);
        if (kind === 'reject') {
            ok = again.length === 0 && bodies.indexOf('sentinel') >= 0;
        } else {
            ok = again.length === 1 && bodies.indexOf('sentinel') >= 0;
            if (ok) {
                const dc = again[0].delivery_count || 0;
                detail += '; redelivered with delivery-count ' + dc;
                if (kind === 'modify' && dc !== 1) ok = false;
            }
        }
        connection.close();
        report(ok, detail);
    },

    'large': async function () {
        const connection = await connect();
        const address = prefix + '-q';
        const payload = crypto.randomBytes(4 * 1024 * 1024);
        const digest = crypto.createHash('sha256').update(payload).digest('hex');
        const sent = await sendAll(connection, address, 1, function () {
            return {body: rhea.message.data_section(payload)};
        });
        const got = await receive(connection, {source: {address: address}, credit_window: 10}, null,
            function (messages) { return messages.length >= 1; }, 20000);
        const body = got.messages.length ? got.messages[0].body : undefined;
        const content = body && body.content !== undefined ? body.content : body;
        const same = Buffer.isBuffer(content) && content.length === payload.length &&
            crypto.createHash('sha256').update(content).digest('hex') === digest;
        connection.close();
        report(same && sent.outcomes.accepted === 1, 'a 4 MiB data section: outcome ' + JSON.stringify(sent.outcomes) +
            ', received ' + (Buffer.isBuffer(content) ? content.length + ' bytes' : typeof content) +
            (same ? ', identical' : ', DIFFERENT'));
    },

    'drain': async function () {
        const connection = await connect();
        const address = prefix + '-q';
        await sendAll(connection, address, 2, function (i) { return {body: i}; });
        const receiver = connection.open_receiver({source: {address: address}, credit_window: 0});
        let received = 0;
        receiver.on('message', function () { received++; });
        await new Promise(function (resolve) { receiver.on('receiver_open', resolve); });
        receiver.add_credit(5);
        const drained = new Promise(function (resolve) { receiver.on('receiver_drained', resolve); });
        receiver.drain_credit();
        await drained;
        await sleep(300);
        const ok = received === 2 && receiver.credit === 0;
        connection.close();
        report(ok, 'drain answered: ' + received + ' messages, credit ' + receiver.credit + ' afterwards');
    },

    'dynamic': async function () {
        const connection = await connect();
        const receiver = connection.open_receiver({source: {dynamic: true}, credit_window: 10});
        const address = await new Promise(function (resolve, reject) {
            receiver.on('receiver_open', function (context) {
                resolve(context.receiver.remote.attach.source.address);
            });
            receiver.on('receiver_error', function (context) { reject(new Error(describe(context.receiver.error))); });
        });
        if (!address) return report(false, 'the dynamic attach was answered without an address');
        const got = new Promise(function (resolve) { receiver.on('message', function (c) { resolve(c.message); }); });
        await sendAll(connection, address, 1, function () { return {body: 'to the dynamic node'}; });
        const message = await got;
        connection.close();
        // an unguessable part of a node's name (the embedded broker's) is left out: the report stays the same
        const shown = address.replace(/\.[0-9a-f]{16}$/, '.<random>');
        report(message.body === 'to the dynamic node', 'dynamic node ' + JSON.stringify(shown) +
            ' created; a message sent to it came back');
    },

    'request-reply': async function () {
        const connection = await connect();
        const receiver = connection.open_receiver({source: {dynamic: true}, credit_window: 100});
        const replyTo = await new Promise(function (resolve) {
            receiver.on('receiver_open', function (context) { resolve(context.receiver.remote.attach.source.address); });
        });
        const replies = new Map();
        const done = new Promise(function (resolve) {
            receiver.on('message', function (context) {
                replies.set(context.message.correlation_id, context.message.body);
                if (replies.size === count) resolve();
            });
        });
        await sendAll(connection, prefix + '-requests', count, function (i) {
            return {body: 'request ' + i, message_id: 'req-' + i, reply_to: replyTo};
        });
        await done;
        let wrong = 0;
        for (let i = 0; i < count; i++) {
            if (replies.get('req-' + i) !== 'reply to request ' + i) wrong++;
        }
        connection.close();
        report(wrong === 0, count + ' requests with reply-to a dynamic node, ' + replies.size + ' replies, ' + wrong +
            ' wrong');
    },

    'sasl-plain': async function () {
        const connection = await connect({username: user, password: password});
        const sent = await sendAll(connection, prefix + '-q', 1, function () { return {body: 'authenticated'}; });
        connection.close();
        let refused = null;
        try {
            const bad = await connect({username: user, password: password + '-wrong'});
            bad.close();
        } catch (error) {
            refused = error.message;
        }
        report(sent.outcomes.accepted === 1 && refused !== null, 'PLAIN as ' + user + ': a message accepted; ' +
            'a wrong password: ' + (refused === null ? 'CONNECTED' : refused));
    },

    'error': async function () {
        const connection = await connect();
        const receiver = connection.open_receiver({
            source: {address: prefix + '-q', filter: rhea.filter.selector('a = = 1')},
        });
        const error = await new Promise(function (resolve) {
            receiver.on('receiver_error', function (context) { resolve(context.receiver.error); });
            receiver.on('receiver_open', function () {});
        });
        connection.close();
        const text = describe(error);
        report(/invalid-field/.test(text), 'an invalid selector: the link detached with ' + text);
    },
};

async function main() {
    if (scenario === 'reject' || scenario === 'release' || scenario === 'modify') {
        await scenarios.outcome(scenario);
    } else if (scenarios[scenario]) {
        await scenarios[scenario]();
    } else {
        report(false, 'unknown scenario ' + scenario);
    }
}

main().catch(function (error) {
    clearTimeout(timer);
    report(false, 'rhea client: ' + (error && error.message ? error.message : String(error)));
});
