"""The receive hot path: a run of ordinary transfer frames taken in one loop, straight from the received bytes.

Every message received costs one transfer frame, and the general input path gives each frame five calls (framing,
the connection's dispatch, the field parser, the session, the link) and a list of its fields between them. Here
one loop reads the frames of the buffered bytes in place and does for each what those five do for an ordinary
message: a transfer frame (§2.7.5) in the common layout (as :func:`~.transfer_frames.parse_transfer_fields`
reads it, here without the list), that is a whole delivery (not ``more``, not aborted, no state, §2.6.14), on a
receiving link that is attached, has credit and no delivery under way, in a session that is begun and whose
incoming window has room. A streaming link's too (the broker's, a stream receiver's): a delivery of one frame is
whole at once there as well; one of several frames goes to the general path, which hands it over at its first.

It takes only frames for which nothing can be wrong, and enforces no rule of its own: the first frame it does not
take (another performative, an unusual encoding, a frame cut short, a delivery in several frames, a link without
credit, a window used up, anything the peer got wrong) ends the run, and the general path reads that frame, with
every check and the error the spec names. The frames taken are counted by the general path's own methods, once
for each run of frames of one link: the session's incoming window (§2.5.6: Session._count_incoming_frames), the
link's credit and delivery-count (§2.6.7: ReceiverLink._use_credit); each delivery goes, as there, into the
unsettled map (§2.6.12) and the link's queue, announced once per input.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from .delivery import Delivery
from .endpoint import ACTIVE
from .link import ReceiverLink
from .serial import MASK

if TYPE_CHECKING:
    from .connection import Connection
    from .session import Session

__all__ = ["take_transfers"]

#: A frame's header (§2.3.1: size, data offset, type, channel) and the first bytes of its body, read at once: for a
#: transfer with its fields in a list8, the descriptor (0x00, smallulong 0x53, code 0x14, §2.7.5), the list8
#: constructor (0xC0), the list's size and its count of fields.
_unpack_head = struct.Struct(">IBBHIBB").unpack_from
_unpack_I = struct.Struct(">I").unpack_from
_TRANSFER_LIST8 = 0x005314C0
#: The smallest frame read here: header, descriptor and list8 head, a handle, a delivery-id and an empty tag.
_SMALLEST = 8 + 6 + 1 + 1 + 2
_HALF_SERIAL = 1 << 31


def _count_run(session: Session, link: ReceiverLink, frames: int) -> None:
    """A run of ``frames`` frames of ``link`` taken: counted as the general path counts each of them."""
    session._count_incoming_frames(frames)
    link._use_credit(frames)


def take_transfers(connection: Connection) -> int:
    """Take the ordinary transfer frames at the start of ``connection``'s buffered input (see the module's
    docstring), as the general path would; return how many were taken (0: the next frame is the general path's,
    or not all here yet). The connection has had the peer's open and not its close (the caller checks)."""
    decoder = connection._decoder
    data, position = decoder.piece()
    limit = len(data)
    max_frame_size = decoder.max_frame_size
    sessions = connection._sessions_by_remote_channel
    taken = 0
    # The link of the run of frames being taken, how many it may take before it is checked again, how many it took.
    run_channel = run_handle = -1
    # Set with the budget, before the run's first frame (a run of none counts nothing). Typed here, not cast: a
    # cast is a call, and this function runs on every input.
    run_session: Session = None  # type: ignore[assignment]
    run_link: ReceiverLink = None  # type: ignore[assignment]
    budget = run_taken = 0
    try:
        while position + _SMALLEST <= limit:
            size, data_offset, frame_type, channel, head, list_size, count = _unpack_head(data, position)
            end = position + size
            # §2.3.1: data offset 2 (no extended header), an AMQP frame, whole in this piece; a transfer.
            if (
                head != _TRANSFER_LIST8
                or data_offset != 2
                or frame_type != 0
                or end > limit
                or size > max_frame_size
                or count < 3
                or count > 6
            ):
                break
            cursor = position + 14  # the first field
            list_end = cursor - 1 + list_size  # list8's size counts its count byte
            if list_end > end:
                break
            # handle
            code = data[cursor]
            if code == 0x52:
                handle = data[cursor + 1]
                cursor += 2
            elif code == 0x43:
                handle = 0
                cursor += 1
            elif code == 0x70:
                handle = _unpack_I(data, cursor + 1)[0]
                cursor += 5
            else:
                break
            # delivery-id
            code = data[cursor]
            if code == 0x70:
                delivery_id = _unpack_I(data, cursor + 1)[0]
                cursor += 5
            elif code == 0x52:
                delivery_id = data[cursor + 1]
                cursor += 2
            elif code == 0x43:
                delivery_id = 0
                cursor += 1
            else:
                break
            # delivery-tag: a bin8
            if data[cursor] != 0xA0:
                break
            tag_start = cursor + 2
            cursor = tag_start + data[cursor + 1]
            tag = data[tag_start:cursor]
            message_format = 0
            settled = False
            if count > 3:
                code = data[cursor]
                if code == 0x43 or code == 0x40:
                    cursor += 1
                elif code == 0x52:
                    message_format = data[cursor + 1]
                    cursor += 2
                elif code == 0x70:
                    message_format = _unpack_I(data, cursor + 1)[0]
                    cursor += 5
                else:
                    break
                if count > 4:
                    code = data[cursor]
                    if code == 0x41:
                        settled = True
                    elif code != 0x42 and code != 0x40:
                        break
                    cursor += 1
                    if count > 5:
                        code = data[cursor]
                        if code != 0x42 and code != 0x40:
                            break  # more (a delivery in several frames), or not a boolean
                        cursor += 1
            if cursor != list_end:
                break
            if run_taken == budget or channel != run_channel or handle != run_handle:
                # Another link than the last frame's (or its budget is spent): count the run, then look the frame's
                # link up and check it.
                if run_taken:
                    _count_run(run_session, run_link, run_taken)
                    run_taken = 0
                session = sessions.get(channel)
                if session is None or session.local_state is not ACTIVE:
                    break
                remaining = (session._advertised_limit - session.next_incoming_id) & MASK
                if remaining == 0 or remaining >= _HALF_SERIAL:
                    break
                link = session._links_by_remote_handle.get(handle)
                if (
                    link is None
                    or link.__class__ is not ReceiverLink
                    or link.local_state is not ACTIVE
                    or link.link_credit <= 0
                    or link._current is not None
                ):
                    break
                # Nothing but this loop acts on the engine until it returns, and a frame taken changes only the
                # window and the credit, by one each: so the same link may take this many frames unchecked, and
                # they are counted together once the run ends.
                budget = min(remaining, link.link_credit)
                run_channel = channel
                run_handle = handle
                run_session = session
                run_link = link
                connection._announce_deliveries(link)  # once per input (it says so only the first time)
            expected = run_session._expected_delivery_id
            if delivery_id != expected and expected is not None:
                break  # not the session's next delivery-id (§2.6.12): the general path ends the session
            run_session._expected_delivery_id = (delivery_id + 1) & MASK
            # The frame is taken (the run's frames are counted against the window and the credit when it ends).
            delivery = Delivery(run_link, delivery_id, tag, message_format, data[list_end:end], False)
            if settled:
                # Settled by the sender: not tracked, and any entry of its id (a peer reusing the id of an unsettled
                # delivery) is dropped: the general path tracks it and then drops it, which leaves the map so too.
                delivery.remote_settled = True
                run_session._incoming_unsettled.pop(delivery_id, None)
            else:
                run_session._incoming_unsettled[delivery_id] = delivery
            run_link.incoming.append(delivery)
            position = end
            run_taken += 1
            taken += 1
    except (IndexError, struct.error):
        pass  # a frame cut short: the general path reads it and says so
    if run_taken:
        _count_run(run_session, run_link, run_taken)
    if taken:
        decoder.consume_to(position)
    return taken
