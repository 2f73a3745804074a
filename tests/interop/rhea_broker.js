#!/usr/bin/env node
// A small in-memory AMQP 1.0 broker on rhea (pure JavaScript): the "rhea listener" peer of the interop matrix
// (tests/test_interop_matrix.py). See README.md next to this file.
//
// usage: node rhea_broker.js [--host 127.0.0.1] [--port 0] [--user NAME --password SECRET] [--websocket PATH]
//
// Prints "listening on PORT" once it listens, then serves until killed (SIGTERM/SIGINT end it cleanly).
// With --websocket PATH it serves AMQP over WebSocket instead (rhea's websocket_accept on a `ws` server, npm
// package `ws`, subprotocol "amqp"), at that path only.
//
// * Queues by address, made on first attach. A link on which the client sends delivers into the queue named by
//   its target address; with no target address (ANONYMOUS-RELAY, offered) into the queue named by message.to.
// * A link on which the client receives consumes from the queue named by its source address, as credit allows,
//   round-robin between consumers; pre-settled when the client asked for snd-settle-mode settled.
// * A dynamic source (or target) gets a fresh "temp-queue://N" address, deleted when its link closes.
// * Outcomes of the client: accepted and rejected consume the message; released puts it back at the head of its
//   queue; modified too, with delivery-count incremented when delivery-failed (and dropped when
//   undeliverable-here). Unsettled messages of a link or connection that closes go back to their queue.
// * Drain: a flow with drain set gets what the queue has within the credit, then the rest of the credit back.
// * SASL: ANONYMOUS by default; with --user/--password, PLAIN only (that user and password).
// * Fault injection: an attach to "interop-fault-detach" is answered and then detached with amqp:not-allowed;
//   an attach to "interop-fault-close" closes the whole connection with amqp:connection:forced.
'use strict';

const rhea = require('rhea');

function option(name, fallback) {
    const index = process.argv.indexOf('--' + name);
    return index >= 0 && index + 1 < process.argv.length ? process.argv[index + 1] : fallback;
}

const host = option('host', '127.0.0.1');
const port = Number(option('port', '0'));
const user = option('user', undefined);
const password = option('password', undefined);

const container = rhea.create_container({id: 'rhea-interop-broker'});
if (user !== undefined) {
    container.sasl_server_mechanisms.enable_plain(function (name, secret) {
        return name === user && secret === password;
    });
}

const queues = new Map();
let dynamicCounter = 0;

function queue(name) {
    let q = queues.get(name);
    if (q === undefined) {
        q = {name: name, entries: [], consumers: [], next: 0};
        queues.set(name, q);
    }
    return q;
}

function sendOne(sender, q) {
    if (!q.entries.length || !sender.sendable() || sender.is_closed()) return false;
    const entry = q.entries.shift();
    const delivery = sender.send(entry.message);
    if (!delivery.settled) {
        delivery.interop_entry = entry;
        sender.interop_outstanding.add(delivery);
    }
    return true;
}

function dispatch(q) {
    let progress = true;
    while (progress && q.entries.length && q.consumers.length) {
        progress = false;
        for (let i = 0; i < q.consumers.length && q.entries.length; i++) {
            const sender = q.consumers[(q.next + i) % q.consumers.length];
            if (sendOne(sender, q)) {
                progress = true;
            }
        }
        q.next = (q.next + 1) % Math.max(q.consumers.length, 1);
    }
}

function requeue(entry, front) {
    const q = queue(entry.queue);
    if (front) q.entries.unshift(entry);
    else q.entries.push(entry);
    dispatch(q);
}

function faulty(context, address) {
    if (address === 'interop-fault-detach') {
        const link = context.sender || context.receiver;
        link.close({condition: 'amqp:not-allowed', description: 'the rhea broker refuses this address (fault injection)'});
        return true;
    }
    if (address === 'interop-fault-close') {
        context.connection.close({
            condition: 'amqp:connection:forced',
            description: 'the rhea broker closes this connection (fault injection)',
        });
        return true;
    }
    return false;
}

function dropConsumer(sender) {
    const address = sender.interop_queue;
    if (address === undefined) return;
    sender.interop_queue = undefined;
    const q = queues.get(address);
    if (q !== undefined) {
        q.consumers = q.consumers.filter((s) => s !== sender);
    }
    const outstanding = Array.from(sender.interop_outstanding || []).reverse();
    sender.interop_outstanding = new Set();
    for (const delivery of outstanding) {
        requeue(delivery.interop_entry, true);
    }
    if (sender.interop_dynamic) queues.delete(address);
}

container.on('sender_open', function (context) {
    const sender = context.sender;
    const source = sender.remote.attach.source || {};
    sender.local.attach.snd_settle_mode = sender.remote.attach.snd_settle_mode;
    sender.local.attach.rcv_settle_mode = 0;
    let address = source.address;
    if (source.dynamic) {
        address = 'temp-queue://rhea-interop-broker/' + ++dynamicCounter;
        sender.set_source({address: address, dynamic: true});
        sender.interop_dynamic = true;
    } else {
        sender.set_source({address: address});
    }
    if (faulty(context, address)) return;
    sender.interop_outstanding = new Set();
    sender.interop_queue = address;
    const q = queue(address);
    q.consumers.push(sender);
    dispatch(q);
});

container.on('receiver_open', function (context) {
    const receiver = context.receiver;
    const target = receiver.remote.attach.target || {};
    receiver.local.attach.rcv_settle_mode = 0;
    let address = target.address;
    if (target.dynamic) {
        address = 'temp-queue://rhea-interop-broker/' + ++dynamicCounter;
        receiver.set_target({address: address, dynamic: true});
    } else {
        receiver.set_target({address: address});
    }
    if (faulty(context, address)) return;
    receiver.interop_address = address;
});

container.on('message', function (context) {
    const address = context.receiver.interop_address || context.message.to;
    const delivery = context.delivery;
    if (address === undefined || address === null) {
        if (delivery.remote_settled) delivery.update(true);
        else delivery.reject({condition: 'amqp:not-found', description: 'no address: neither a target nor message.to'});
        return;
    }
    const q = queue(address);
    q.entries.push({message: context.message, queue: address});
    // A pre-settled delivery must still be settled here: rhea keeps every delivery in its session's incoming
    // buffer (2048 by default) until it is settled on both sides, and stops granting session window when full.
    if (delivery.remote_settled) delivery.update(true);
    else delivery.accept();
    dispatch(q);
});

function finished(context) {
    context.delivery.interop_done = true;
    context.sender.interop_outstanding.delete(context.delivery);
}

container.on('accepted', finished);
container.on('rejected', finished);
container.on('released', function (context) {
    finished(context);
    requeue(context.delivery.interop_entry, true);
});
container.on('modified', function (context) {
    finished(context);
    const state = context.delivery.remote_state || {};
    const entry = context.delivery.interop_entry;
    if (state.undeliverable_here) return; // one consumer per queue in these tests: nowhere else to deliver it
    if (state.delivery_failed) {
        entry.message.delivery_count = (entry.message.delivery_count || 0) + 1;
    }
    if (state.message_annotations) {
        entry.message.message_annotations = Object.assign({}, entry.message.message_annotations || {},
            state.message_annotations);
    }
    requeue(entry, true);
});

container.on('sendable', function (context) {
    const q = queues.get(context.sender.interop_queue);
    if (q !== undefined) dispatch(q);
});

container.on('sender_draining', function (context) {
    const q = queues.get(context.sender.interop_queue);
    if (q !== undefined) {
        while (sendOne(context.sender, q));
    }
    context.sender.set_drained(true);
});

container.on('sender_close', function (context) {
    dropConsumer(context.sender);
});
container.on('receiver_close', function () {});
container.on('sender_error', function (context) {
    dropConsumer(context.sender);
});
container.on('receiver_error', function () {});
container.on('session_error', function () {});
container.on('connection_error', function () {});
container.on('error', function () {});

container.on('disconnected', function (context) {
    const connection = context.connection;
    // Every consumer of this connection stops; its unsettled messages go back to their queues.
    for (const q of queues.values()) {
        for (const sender of q.consumers.slice()) {
            if (sender.connection === connection) dropConsumer(sender);
        }
    }
});

const listenOptions = {
    host: host,
    port: port,
    autoaccept: false,
    treat_modified_as_released: false,
    credit_window: 500,
    offered_capabilities: ['ANONYMOUS-RELAY'],
    max_frame_size: 65536,
};
const websocketPath = option('websocket', undefined);
let server;
if (websocketPath === undefined) {
    server = container.listen(listenOptions);
} else {
    const ws = require('ws');
    server = new ws.WebSocketServer({
        host: host,
        port: port,
        path: websocketPath,
        // AMQP WebSocket Binding §2.1: the server answers with the "amqp" subprotocol (and refuses without it).
        handleProtocols: function (protocols) { return protocols.has('amqp') ? 'amqp' : false; },
    });
    server.on('connection', function (socket) {
        container.websocket_accept(socket, Object.assign({}, listenOptions));
    });
}
server.on('listening', function () {
    console.log('listening on ' + server.address().port);
});
server.on('error', function (error) {
    console.error('rhea broker: ' + error);
    process.exit(2);
});

function stop() {
    server.close();
    process.exit(0);
}
process.on('SIGTERM', stop);
process.on('SIGINT', stop);
