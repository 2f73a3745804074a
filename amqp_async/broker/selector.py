"""JMS message selectors for the embedded broker (``apache.org:selector-filter:string`` source filters).

A consumer that attaches with a source filter described by ``apache.org:selector-filter:string`` (code
``0x0000468C00000004``), as proton's ``Selector`` option and :func:`amqp_async.selector` build it, is offered only
the messages its selector matches. The language is the JMS 2.0 message selector syntax (a subset of SQL-92
conditional expressions) as ActiveMQ and Qpid implement it for AMQP:

* literals: strings in single quotes (``'it''s'``), exact numerics (``123``, ``1234L``, ``0x1F``, ``017`` octal),
  approximate numerics (``1.5``, ``1e3``, ``.5``, ``7d``, ``2.5f``), ``TRUE``, ``FALSE`` and ``NULL``;
* identifiers (Java identifier rules, case-sensitive) name application properties; as Qpid does, an identifier
  may also be double-quoted (``"x-opt-key"``, with ``""`` for a quote) to reach any property name. The JMS
  header names map onto the AMQP message: ``JMSMessageID`` (``id``), ``JMSCorrelationID`` (``correlation_id``),
  ``JMSPriority`` (``priority``), ``JMSDeliveryMode`` (``'PERSISTENT'`` when ``durable``, else
  ``'NON_PERSISTENT'``), ``JMSTimestamp`` and ``JMSExpiration`` (``creation_time`` and ``expiry_time`` in
  milliseconds, 0 when unset), ``JMSType`` (``subject``, as ActiveMQ maps it), ``JMSDestination`` (``address``),
  ``JMSReplyTo`` (``reply_to``), ``JMSRedelivered`` (``delivery_count > 0``), ``JMSXGroupID`` (``group_id``),
  ``JMSXGroupSeq`` (``group_sequence``), ``JMSXDeliveryCount`` (``delivery_count + 1``) and ``JMSXUserID``
  (``user_id`` as UTF-8 text). Message ids that are ulongs read as numbers, UUIDs as their canonical text,
  binary ids as a value that compares with nothing. Any other identifier is NULL when the message lacks it.
* operators, loosest first: ``OR``; ``AND``; ``NOT``; ``=``, ``<>``, ``IS [NOT] NULL``; ``<``, ``>``, ``<=``,
  ``>=``, ``[NOT] BETWEEN a AND b``, ``[NOT] LIKE 'pattern' [ESCAPE 'c']`` (``%`` any run, ``_`` one
  character), ``[NOT] IN ('a', 'b', ...)``; ``+``, ``-``; ``*``, ``/``; unary ``+`` and ``-``. Keywords are
  case-insensitive; parentheses group.

Evaluation follows SQL's three-valued logic: a value is TRUE, FALSE or unknown (NULL), an operation on NULL is
unknown (except ``IS NULL``), ``NOT`` unknown is unknown, ``FALSE AND`` anything is FALSE and ``TRUE OR``
anything is TRUE, and a message is selected only when the whole selector is TRUE. Values of different kinds
never compare: a string against a number, or anything against a boolean except with ``=`` and ``<>``, is
unknown, as are arithmetic on non-numbers, LIKE and IN on non-strings and integer division by zero. Numbers
compare across ints and floats; integer division truncates toward zero as Java's does; integers do not
overflow. Strings order lexicographically (as ActiveMQ and Qpid allow), booleans only compare for equality.
Mismatches visible in the text itself (``'a' < 1``, ``TRUE > FALSE``, ``NOT 5``, ``'a' + 1``, a selector that is
not a condition) are refused when the selector is compiled.

A selector compiles once (:func:`compile_selector`) into a tree of Python closures, so testing a message
(:meth:`Selector.matches`) costs a few function calls and no parsing. The parser is hand-written (a Pratt
parser over a small tokenizer); nothing in the selector text is ever evaluated as Python. Input length and
nesting depth are bounded, and LIKE patterns match in time linear in the pattern times the value (no regular
expression backtracking), so a hostile selector cannot stall the broker.
"""

from __future__ import annotations

import math
import operator
import re
import unicodedata
import uuid
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Final

from ..errors import AMQPError

if TYPE_CHECKING:
    from ..message import Message

__all__ = ["MAX_DEPTH", "MAX_LENGTH", "Selector", "SelectorError", "compile_selector"]

#: The longest selector text accepted, in characters.
MAX_LENGTH: Final = 64 * 1024
#: The deepest nesting accepted (parentheses, operators within operators).
MAX_DEPTH: Final = 100

_Fn = Callable[["Message"], Any]


class SelectorError(AMQPError, ValueError):
    """A selector that does not parse, or uses operands no evaluation could accept.

    The condition is ``amqp:invalid-field``: the broker refuses the attach that carries it.

    Attributes:
        position: the 0-based index in the selector text where the problem was found (its length for a problem
            at the end).
    """

    default_condition = "amqp:invalid-field"

    def __init__(self, description: str = "", *, position: int = 0, condition: str | None = None) -> None:
        super().__init__(description, condition=condition)
        self.position = position


# --------------------------------------------------------------------------------------------------------------
# Tokens

_KEYWORDS: Final = frozenset({"AND", "OR", "NOT", "BETWEEN", "LIKE", "IN", "IS", "NULL", "TRUE", "FALSE", "ESCAPE"})
_OPERATORS: Final = ("<>", "<=", ">=", "=", "<", ">", "+", "-", "*", "/", "(", ")", ",")
_SPACE: Final = frozenset(" \t\n\r\f")
_DIGITS: Final = frozenset("0123456789")
_HEX_DIGITS: Final = frozenset("0123456789abcdefABCDEF")
_ID_START_CATEGORIES: Final = frozenset({"Lu", "Ll", "Lt", "Lm", "Lo", "Nl", "Sc", "Pc"})
_ID_PART_CATEGORIES: Final = _ID_START_CATEGORIES | {"Nd", "Mn", "Mc", "Cf"}
_INT_LIMIT: Final = 1 << 64

# Token kinds.
_NUM, _STR, _ID, _KW, _OP, _EOF = "number", "string", "identifier", "keyword", "operator", "end"


def _id_start(ch: str) -> bool:
    if ch.isascii():
        return ch.isalpha() or ch == "_" or ch == "$"
    return unicodedata.category(ch) in _ID_START_CATEGORIES


def _id_part(ch: str) -> bool:
    if ch.isascii():
        return ch.isalnum() or ch == "_" or ch == "$"
    return unicodedata.category(ch) in _ID_PART_CATEGORIES


class _Token:
    __slots__ = ("kind", "pos", "value")

    def __init__(self, kind: str, value: Any, pos: int) -> None:
        self.kind = kind
        self.value = value
        self.pos = pos

    def describe(self) -> str:
        if self.kind == _EOF:
            return "the end of the selector"
        if self.kind == _STR:
            return "string " + _quote(self.value)
        if self.kind == _KW:
            return str(self.value)
        if self.kind == _OP:
            return f"'{self.value}'"
        return f"{self.kind} {self.value!r}" if self.kind == _NUM else f"identifier {self.value}"


def _quote(text: str) -> str:
    shown = text if len(text) <= 30 else text[:27] + "..."
    return "'" + shown.replace("'", "''") + "'"


class _Lexer:
    """Splits selector text into tokens; every error names its position."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens: list[_Token] = []

    def error(self, reason: str, pos: int) -> SelectorError:
        return _error(self.text, reason, pos)

    def run(self) -> list[_Token]:
        text = self.text
        end = len(text)
        i = 0
        tokens = self.tokens
        while i < end:
            ch = text[i]
            if ch in _SPACE:
                i += 1
            elif ch in _DIGITS or (ch == "." and i + 1 < end and text[i + 1] in _DIGITS):
                i = self.number(i)
            elif ch == "'":
                start = i
                value, i = self.quoted(i, "'", "string literal")
                tokens.append(_Token(_STR, value, start))
            elif ch == '"':
                start = i
                value, i = self.quoted(i, '"', "quoted identifier")
                if not value:
                    raise self.error("empty quoted identifier", start)
                tokens.append(_Token(_ID, value, start))
            elif _id_start(ch):
                start = i
                i += 1
                while i < end and _id_part(text[i]):
                    i += 1
                word = text[start:i]
                upper = word.upper() if word.isascii() else word
                if upper in _KEYWORDS:
                    tokens.append(_Token(_KW, upper, start))
                else:
                    tokens.append(_Token(_ID, word, start))
            else:
                for op in _OPERATORS:
                    if text.startswith(op, i):
                        if op == "=" and text.startswith("==", i):
                            raise self.error("'==' is not an operator (equality is '=')", i)
                        tokens.append(_Token(_OP, op, i))
                        i += len(op)
                        break
                else:
                    if text.startswith("!=", i):
                        raise self.error("'!=' is not an operator (inequality is '<>')", i)
                    if text.startswith("&&", i) or text.startswith("||", i):
                        raise self.error(f"'{text[i : i + 2]}' is not an operator (use AND, OR)", i)
                    raise self.error(f"unexpected character {ch!r}", i)
        tokens.append(_Token(_EOF, None, end))
        return tokens

    def quoted(self, i: int, quote: str, what: str) -> tuple[str, int]:
        """Read a quoted run starting at ``i`` (a quote), doubled quotes standing for one; return it and the
        index after its closing quote."""
        text = self.text
        parts = []
        j = i + 1
        while True:
            k = text.find(quote, j)
            if k < 0:
                raise self.error(f"unterminated {what}", i)
            parts.append(text[j:k])
            if text.startswith(quote, k + 1):
                parts.append(quote)
                j = k + 2
            else:
                return "".join(parts), k + 1

    def number(self, i: int) -> int:
        """Read a numeric literal starting at ``i``; return the index after it."""
        text = self.text
        end = len(text)
        start = i
        value: int | float
        if text.startswith(("0x", "0X"), i):
            j = i + 2
            while j < end and text[j] in _HEX_DIGITS:
                j += 1
            if j == i + 2:
                raise self.error("malformed hexadecimal literal", start)
            value = int(text[i + 2 : j], 16)
            if j < end and text[j] in "lL":
                j += 1
            return self.finish_int(value, start, j)
        j = i
        while j < end and text[j] in _DIGITS:
            j += 1
        is_float = False
        if j < end and text[j] == ".":
            is_float = True
            j += 1
            while j < end and text[j] in _DIGITS:
                j += 1
        if j < end and text[j] in "eE":
            is_float = True
            j += 1
            if j < end and text[j] in "+-":
                j += 1
            if j >= end or text[j] not in _DIGITS:
                raise self.error("malformed exponent in numeric literal", start)
            while j < end and text[j] in _DIGITS:
                j += 1
        digits = text[i:j]
        if j < end and text[j] in "fFdD":
            is_float = True
            j += 1
        if is_float:
            value = float(digits)
            if j < end and (_id_part(text[j]) or text[j] == "."):
                raise self.error("malformed numeric literal", start)
            self.tokens.append(_Token(_NUM, value, start))
            return j
        if len(digits) > 1 and digits[0] == "0":
            if any(c not in "01234567" for c in digits):
                raise self.error("malformed octal literal (a leading 0 means octal)", start)
            value = int(digits, 8)
        else:
            if len(digits) > 20:
                raise self.error("integer literal out of range", start)
            value = int(digits)
        if j < end and text[j] in "lL":
            j += 1
        return self.finish_int(value, start, j)

    def finish_int(self, value: int, start: int, j: int) -> int:
        text = self.text
        if value >= _INT_LIMIT:
            raise self.error("integer literal out of range", start)
        if j < len(text) and (_id_part(text[j]) or text[j] == "."):
            raise self.error("malformed numeric literal", start)
        self.tokens.append(_Token(_NUM, value, start))
        return j


def _error(text: str, reason: str, pos: int) -> SelectorError:
    """A SelectorError naming the position, with an excerpt of the text from there."""
    if pos >= len(text):
        where = "" if "end of the selector" in reason else " (the end of the selector)"
        return SelectorError(f"{reason} at position {pos}{where}", position=pos)
    excerpt = text[pos : pos + 24]
    if len(text) > pos + 24:
        excerpt += "..."
    return SelectorError(f"{reason} at position {pos}: {excerpt!r}", position=pos)


# --------------------------------------------------------------------------------------------------------------
# Syntax tree

# Static kinds of an expression's value, known from the text alone.
_BOOL, _NUMBER, _STRING, _NULL, _ANY = "a condition", "a number", "a string", "NULL", "a property"

# Binding powers (loosest first).
_BP_OR, _BP_AND, _BP_NOT, _BP_EQUALITY, _BP_RELATIONAL, _BP_ADD, _BP_MUL = 1, 2, 3, 4, 5, 6, 7
_RELATIONAL_OPS: Final = frozenset({"<", ">", "<=", ">="})


class _Node:
    """A node of the syntax tree: an operation, its operands, its static kind and its depth.

    ``pos`` is where its operator is, ``start`` where its text begins (for messages about the whole operand).
    """

    __slots__ = ("args", "children", "depth", "kind", "op", "pos", "start")

    def __init__(self, op: str, kind: str, pos: int, *args: Any, children: tuple[_Node, ...] = ()) -> None:
        self.op = op
        self.kind = kind
        self.pos = pos
        self.args = args
        self.children = children
        self.depth: int = 1 + max((child.depth for child in children), default=0)
        self.start: int = min(pos, children[0].start) if children else pos


def _kind_of(value: Any) -> str:
    if value is None:
        return _NULL
    if value.__class__ is bool:
        return _BOOL
    if value.__class__ is str:
        return _STRING
    return _NUMBER


class _Parser:
    """A Pratt parser: ``expression(rbp)`` reads operators that bind tighter than ``rbp``."""

    def __init__(self, text: str, tokens: list[_Token]) -> None:
        self.text = text
        self.tokens = tokens
        self.index = 0
        self.depth = 0

    def error(self, reason: str, pos: int) -> SelectorError:
        return _error(self.text, reason, pos)

    @property
    def peek(self) -> _Token:
        return self.tokens[self.index]

    def advance(self) -> _Token:
        token = self.tokens[self.index]
        if token.kind != _EOF:
            self.index += 1
        return token

    def at_keyword(self, word: str, offset: int = 0) -> bool:
        token = self.tokens[min(self.index + offset, len(self.tokens) - 1)]
        return token.kind == _KW and token.value == word

    def at_operator(self, op: str) -> bool:
        token = self.tokens[self.index]
        return token.kind == _OP and token.value == op

    def expect_keyword(self, word: str, context: str) -> _Token:
        if not self.at_keyword(word):
            token = self.peek
            raise self.error(f"expected {word} {context}, found {token.describe()}", token.pos)
        return self.advance()

    def expect_operator(self, op: str, context: str) -> _Token:
        if not self.at_operator(op):
            token = self.peek
            raise self.error(f"expected '{op}' {context}, found {token.describe()}", token.pos)
        return self.advance()

    def expect_string(self, context: str) -> _Token:
        token = self.peek
        if token.kind != _STR:
            raise self.error(f"expected a string literal {context}, found {token.describe()}", token.pos)
        return self.advance()

    def make(self, op: str, kind: str, pos: int, *args: Any, children: tuple[_Node, ...] = ()) -> _Node:
        node = _Node(op, kind, pos, *args, children=children)
        if node.depth > 2 * MAX_DEPTH:
            raise self.error(f"selector is too complex (more than {2 * MAX_DEPTH} levels of operations)", pos)
        return node

    def parse(self) -> _Node:
        if self.peek.kind == _EOF:
            raise SelectorError("selector is empty", position=0)
        node = self.expression(0)
        token = self.peek
        if token.kind != _EOF:
            if token.kind == _OP and token.value == ")":
                raise self.error("unbalanced ')'", token.pos)
            raise self.error(f"unexpected {token.describe()} after a complete expression", token.pos)
        self.check(node, (_BOOL, _ANY, _NULL), "the selector must be a condition")
        return node

    def check(self, node: _Node, kinds: tuple[str, ...], reason: str) -> None:
        if node.kind not in kinds:
            raise self.error(f"{reason}, not {node.kind}", node.start)

    # --- expressions ---------------------------------------------------------------------------------------

    def expression(self, rbp: int) -> _Node:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise self.error(f"selector is nested too deeply (more than {MAX_DEPTH} levels)", self.peek.pos)
        left = self.prefix(rbp)
        while True:
            token = self.peek
            lbp = self.binding_power(token)
            if lbp <= rbp:
                break
            left = self.infix(left, lbp)
        self.depth -= 1
        return left

    def binding_power(self, token: _Token) -> int:
        kind, value = token.kind, token.value
        if kind == _OP:
            if value in ("=", "<>"):
                return _BP_EQUALITY
            if value in _RELATIONAL_OPS:
                return _BP_RELATIONAL
            if value in ("+", "-"):
                return _BP_ADD
            if value in ("*", "/"):
                return _BP_MUL
        elif kind == _KW:
            if value == "OR":
                return _BP_OR
            if value == "AND":
                return _BP_AND
            if value == "IS":
                return _BP_EQUALITY
            if value in ("LIKE", "BETWEEN", "IN"):
                return _BP_RELATIONAL
            if value == "NOT" and self.tokens[self.index + 1].value in ("LIKE", "BETWEEN", "IN"):
                return _BP_RELATIONAL
        return 0

    def prefix(self, rbp: int) -> _Node:
        token = self.advance()
        kind, value, pos = token.kind, token.value, token.pos
        if kind in (_NUM, _STR):
            return self.make("lit", _kind_of(value), pos, value)
        if kind == _ID:
            return self.make("id", _ANY, pos, value)
        if kind == _KW:
            if value == "TRUE" or value == "FALSE":
                return self.make("lit", _BOOL, pos, value == "TRUE")
            if value == "NULL":
                return self.make("lit", _NULL, pos, None)
            if value == "NOT":
                if rbp > _BP_NOT:
                    raise self.error("NOT inside a comparison or arithmetic must be in parentheses", pos)
                operand = self.expression(_BP_NOT)
                self.check(operand, (_BOOL, _ANY, _NULL), "NOT needs a condition")
                if operand.op == "lit":
                    folded = operand.args[0]
                    return self.make("lit", _kind_of(folded), pos, None if folded is None else not folded)
                return self.make("not", _BOOL, pos, children=(operand,))
            raise self.error(f"unexpected {value} where a value was expected", pos)
        if kind == _OP:
            if value == "(":
                inner = self.expression(0)
                self.expect_operator(")", f"to close the '(' at position {pos}")
                return inner
            if value == "+" or value == "-":
                operand = self.expression(_BP_MUL)
                self.check(operand, (_NUMBER, _ANY, _NULL), f"unary '{value}' needs a number")
                if value == "+":
                    return operand
                if operand.op == "lit":
                    negated_value: Any = operand.args[0]
                    return self.make("lit", operand.kind, pos, None if negated_value is None else -negated_value)
                return self.make("neg", _NUMBER, pos, children=(operand,))
            if value == ")":
                raise self.error("unexpected ')' where a value was expected", pos)
            raise self.error(f"unexpected '{value}' where a value was expected", pos)
        raise self.error("unexpected end of the selector, a value was expected", pos)

    def infix(self, left: _Node, lbp: int) -> _Node:
        token = self.peek
        value, pos = token.value, token.pos
        if lbp in (_BP_OR, _BP_AND):
            return self.logical(left, value, lbp)
        self.advance()
        if value in ("+", "-", "*", "/"):
            right = self.expression(lbp)
            self.check(left, (_NUMBER, _ANY, _NULL), f"'{value}' needs numbers")
            self.check(right, (_NUMBER, _ANY, _NULL), f"'{value}' needs numbers")
            return self.make("arith", _NUMBER, pos, value, children=(left, right))
        if value in ("=", "<>") or value in _RELATIONAL_OPS:
            right = self.expression(lbp)
            self.check_comparable(left, right, value, pos)
            return self.make("cmp", _BOOL, pos, value, children=(left, right))
        if value == "IS":
            negated = self.at_keyword("NOT")
            if negated:
                self.advance()
            self.expect_keyword("NULL", "after IS NOT" if negated else "after IS")
            return self.make("isnull", _BOOL, pos, negated, children=(left,))
        negated = value == "NOT"
        if negated:
            value = self.advance().value
        if value == "BETWEEN":
            low = self.expression(_BP_RELATIONAL)
            self.expect_keyword("AND", "between the bounds of BETWEEN")
            high = self.expression(_BP_RELATIONAL)
            self.check_comparable(left, low, "BETWEEN", pos)
            self.check_comparable(left, high, "BETWEEN", pos)
            return self.make("between", _BOOL, pos, negated, children=(left, low, high))
        self.check(left, (_STRING, _ANY, _NULL), f"{value} needs a string")
        if value == "LIKE":
            pattern_token = self.expect_string("after LIKE")
            pattern = pattern_token.value
            escape: str | None = None
            if self.at_keyword("ESCAPE"):
                self.advance()
                escape_token = self.expect_string("after ESCAPE")
                escape = escape_token.value
                if len(escape) != 1:
                    raise self.error("the ESCAPE string must be exactly one character", escape_token.pos)
            try:
                matcher = _like_matcher(pattern, escape)
            except ValueError as exc:
                raise self.error(str(exc), pattern_token.pos) from None
            return self.make("like", _BOOL, pos, negated, matcher, children=(left,))
        # IN
        self.expect_operator("(", "after IN")
        items = [self.expect_string("in the IN list").value]
        while self.at_operator(","):
            self.advance()
            items.append(self.expect_string("in the IN list").value)
        self.expect_operator(")", "to close the IN list")
        return self.make("in", _BOOL, pos, negated, frozenset(items), children=(left,))

    def logical(self, left: _Node, word: str, lbp: int) -> _Node:
        pos = self.peek.pos
        self.check(left, (_BOOL, _ANY, _NULL), f"{word} needs conditions")
        terms = [left]
        while self.at_keyword(word):
            self.advance()
            term = self.expression(lbp)
            self.check(term, (_BOOL, _ANY, _NULL), f"{word} needs conditions")
            terms.append(term)
        return self.make(word.lower(), _BOOL, pos, children=tuple(terms))

    def check_comparable(self, left: _Node, right: _Node, op: str, pos: int) -> None:
        known = (_BOOL, _NUMBER, _STRING)
        for side in (left, right):
            if side.kind == _BOOL and op not in ("=", "<>"):
                raise self.error(f"booleans can only be compared with = and <>, not {op}", pos)
        if left.kind in known and right.kind in known and left.kind != right.kind:
            raise self.error(f"cannot compare {left.kind} with {right.kind}", pos)


# --------------------------------------------------------------------------------------------------------------
# LIKE patterns


def _like_matcher(pattern: str, escape: str | None) -> Callable[[str], bool]:
    """A function matching a string against a LIKE pattern: ``%`` any run, ``_`` any one character.

    The pattern is cut at each ``%`` into fixed-length segments; the first must match at the start, the last at
    the end, and each middle one at its leftmost place after the previous (which is correct for such patterns),
    so matching takes at most len(value) x len(pattern) steps, never regular-expression backtracking.
    """
    segments: list[list[str | None]] = [[]]  # None stands for '_'
    chars = iter(pattern)
    for ch in chars:
        if escape is not None and ch == escape:
            following = next(chars, None)
            if following is None:
                raise ValueError("the LIKE pattern ends with its escape character")
            segments[-1].append(following)
        elif ch == "%":
            segments.append([])
        elif ch == "_":
            segments[-1].append(None)
        else:
            segments[-1].append(ch)
    compiled = [_segment(items) for items in segments]
    if len(compiled) == 1:
        only = compiled[0]
        if isinstance(only, str):
            return only.__eq__
        size = len(segments[0])
        return lambda value: len(value) == size and only.match(value) is not None
    first, last = compiled[0], compiled[-1]
    # The middle segments with their lengths; empty ones (from '%%') match anywhere and are dropped.
    middle = [(seg, len(items)) for seg, items in zip(compiled[1:-1], segments[1:-1], strict=True) if items]
    minimum = sum(len(items) for items in segments)
    if not middle and isinstance(first, str) and isinstance(last, str):
        if not first:
            return (lambda value: True) if not last else (lambda value: value.endswith(last))
        if not last:
            return lambda value: value.startswith(first)
        return lambda value: len(value) >= minimum and value.startswith(first) and value.endswith(last)
    first_size, last_size = len(segments[0]), len(segments[-1])

    def match(value: str) -> bool:
        if len(value) < minimum:
            return False
        if first_size and not _match_at(first, value, 0):
            return False
        pos = first_size
        for segment, size in middle:
            found = value.find(segment, pos) if isinstance(segment, str) else _search(segment, value, pos)
            if found < 0:
                return False
            pos = found + size
        start = len(value) - last_size
        return start >= pos and (not last_size or _match_at(last, value, start))

    return match


def _segment(items: list[str | None]) -> str | re.Pattern[str]:
    if None not in items:
        return "".join(item for item in items if item is not None)
    return re.compile("".join("." if item is None else re.escape(item) for item in items), re.DOTALL)


def _match_at(segment: str | re.Pattern[str], value: str, pos: int) -> bool:
    if isinstance(segment, str):
        return value.startswith(segment, pos)
    return segment.match(value, pos) is not None


def _search(segment: re.Pattern[str], value: str, pos: int) -> int:
    found = segment.search(value, pos)
    return -1 if found is None else found.start()


# --------------------------------------------------------------------------------------------------------------
# Values


def _normalize(value: Any) -> Any:
    """A property value as the selector sees it: a bool, int, float or str of the exact builtin class (AMQP's
    int, float and string subclasses folded in), None, or an opaque value that compares with nothing."""
    cls = value.__class__
    if cls is bool or cls is int or cls is float or cls is str or value is None:
        return value
    if isinstance(value, int):
        if cls.__name__ in ("decimal32", "decimal64"):  # raw IEEE 754 decimal bits, not a number
            return value
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value


def _message_id(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return str(value)
    return _normalize(value)


def _milliseconds(seconds: float) -> int:
    return round(seconds * 1000)


def _user_id(message: Message) -> str | None:
    user = message.user_id
    return None if user is None else user.decode("utf-8", "replace")


_HEADERS: Final[dict[str, _Fn]] = {
    "JMSMessageID": lambda m: _message_id(m.id),
    "JMSCorrelationID": lambda m: _message_id(m.correlation_id),
    "JMSPriority": lambda m: int(m.priority),
    "JMSDeliveryMode": lambda m: "PERSISTENT" if m.durable else "NON_PERSISTENT",
    "JMSTimestamp": lambda m: _milliseconds(m.creation_time),
    "JMSExpiration": lambda m: _milliseconds(m.expiry_time),
    "JMSType": lambda m: _normalize(m.subject),
    "JMSDestination": lambda m: _normalize(m.address),
    "JMSReplyTo": lambda m: _normalize(m.reply_to),
    "JMSRedelivered": lambda m: m.delivery_count > 0,
    "JMSXGroupID": lambda m: _normalize(m.group_id),
    "JMSXGroupSeq": lambda m: int(m.group_sequence),
    "JMSXDeliveryCount": lambda m: int(m.delivery_count) + 1,
    "JMSXUserID": _user_id,
}

_NUMERIC: Final = frozenset({int, float})
_STRINGS: Final = frozenset({str})
_BOOLEANS: Final = frozenset({bool})
_KINDS: Final[dict[type, frozenset[type]]] = {int: _NUMERIC, float: _NUMERIC, str: _STRINGS, bool: _BOOLEANS}
_ORDERED: Final[dict[type, frozenset[type]]] = {int: _NUMERIC, float: _NUMERIC, str: _STRINGS}
_COMPARATORS: Final[dict[str, Callable[[Any, Any], bool]]] = {
    "=": operator.eq,
    "<>": operator.ne,
    "<": operator.lt,
    ">": operator.gt,
    "<=": operator.le,
    ">=": operator.ge,
}
_FLIPPED: Final = {"=": "=", "<>": "<>", "<": ">", ">": "<", "<=": ">=", ">=": "<="}


def _compare(op: str, left: Any, right: Any) -> bool | None:
    """Three-valued comparison of two values (None when unknown)."""
    if left is None or right is None:
        return None
    kinds = (_KINDS if op == "=" or op == "<>" else _ORDERED).get(left.__class__)
    if kinds is None or right.__class__ not in kinds:
        return None
    return _COMPARATORS[op](left, right)


def _divide(left: Any, right: Any) -> Any:
    if left.__class__ is int and right.__class__ is int:
        if right == 0:
            return None  # Java raises ArithmeticException: no value
        quotient = abs(left) // abs(right)
        return quotient if (left < 0) == (right < 0) else -quotient
    try:
        return left / right
    except ZeroDivisionError:
        if left != left or left == 0:
            return math.nan
        return math.copysign(math.inf, left) * math.copysign(1.0, right)


_ARITHMETIC: Final[dict[str, Callable[[Any, Any], Any]]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": _divide,
}


def _arithmetic(op: str, left: Any, right: Any) -> Any:
    if left.__class__ not in _NUMERIC or right.__class__ not in _NUMERIC:
        return None
    try:
        return _ARITHMETIC[op](left, right)
    except OverflowError:
        return None


# --------------------------------------------------------------------------------------------------------------
# Compilation into closures


def _constant(value: Any) -> _Fn:
    return lambda message: value


def _getter(name: str) -> _Fn:
    header = _HEADERS.get(name)
    if header is not None:
        return header

    def get(message: Message) -> Any:
        properties = message.properties
        if properties is None:
            return None
        return _normalize(properties.get(name))

    return get


def _compile(node: _Node) -> _Fn:
    """A closure computing the node's value for a message (True, False, None for unknown, a number, a string)."""
    op = node.op
    if op == "lit":
        return _constant(node.args[0])
    if op == "id":
        return _getter(node.args[0])
    if op == "and" or op == "or":
        return _compile_logical(op, [_compile(child) for child in node.children])
    if op == "not":
        operand = _compile(node.children[0])

        def negate(message: Message) -> bool | None:
            value = operand(message)
            if value is True:
                return False
            if value is False:
                return True
            return None

        return negate
    if op == "cmp":
        return _compile_comparison(node.args[0], *node.children)
    if op == "arith":
        return _compile_arithmetic(node.args[0], *node.children)
    if op == "neg":
        operand = _compile(node.children[0])

        def minus(message: Message) -> Any:
            number: Any = operand(message)
            cls = number.__class__
            return -number if cls is int or cls is float else None

        return minus
    if op == "isnull":
        return _compile_is_null(node.args[0], _compile(node.children[0]))
    if op == "between":
        return _compile_between(node.args[0], *node.children)
    if op == "like" or op == "in":
        negated, test = node.args
        if op == "in":
            test = test.__contains__
        return _compile_string_test(negated, test, _compile(node.children[0]))
    raise AssertionError(f"unknown node {op}")  # pragma: no cover


def _compile_logical(op: str, terms: list[_Fn]) -> _Fn:
    decisive = op == "or"  # OR: one TRUE decides; AND: one FALSE decides

    def logical(message: Message) -> bool | None:
        unknown = False
        for term in terms:
            value = term(message)
            if value is decisive:
                return op == "or"
            if value is not (not decisive):
                unknown = True
        return None if unknown else not decisive

    return logical


def _compile_comparison(op: str, left: _Node, right: _Node) -> _Fn:
    if left.op == "lit" and right.op != "lit":
        left, right, op = right, left, _FLIPPED[op]
    compare = _COMPARATORS[op]
    if right.op == "lit":
        literal = right.args[0]
        if literal is None:
            return _constant(None)
        kinds = (_KINDS if op == "=" or op == "<>" else _ORDERED).get(literal.__class__, frozenset())
        if left.op == "id" and left.args[0] not in _HEADERS:
            name = left.args[0]

            def property_vs_literal(message: Message) -> bool | None:
                properties = message.properties
                if properties is None:
                    return None
                value = properties.get(name)
                if value.__class__ not in kinds:
                    if value is None:
                        return None
                    value = _normalize(value)
                    if value.__class__ not in kinds:
                        return None
                return compare(value, literal)

            return property_vs_literal
        operand = _compile(left)

        def value_vs_literal(message: Message) -> bool | None:
            value = operand(message)
            if value.__class__ not in kinds:
                return None
            return compare(value, literal)

        return value_vs_literal
    first, second = _compile(left), _compile(right)
    return lambda message: _compare(op, first(message), second(message))


def _compile_arithmetic(op: str, left: _Node, right: _Node) -> _Fn:
    first, second = _compile(left), _compile(right)
    if left.op == "lit" and right.op == "lit":
        return _constant(_arithmetic(op, left.args[0], right.args[0]))
    if op != "/":
        function = _ARITHMETIC[op]

        def arithmetic(message: Message) -> Any:
            a = first(message)
            b = second(message)
            if a.__class__ not in _NUMERIC or b.__class__ not in _NUMERIC:
                return None
            try:
                return function(a, b)
            except OverflowError:
                return None

        return arithmetic
    return lambda message: _arithmetic(op, first(message), second(message))


def _compile_is_null(negated: bool, operand: _Fn) -> _Fn:
    if negated:
        return lambda message: operand(message) is not None
    return lambda message: operand(message) is None


def _compile_between(negated: bool, node: _Node, low_node: _Node, high_node: _Node) -> _Fn:
    operand = _compile(node)
    if low_node.op == "lit" and high_node.op == "lit" and low_node.kind == high_node.kind != _NULL:
        # Both bounds literals of one kind (the parser allows only numbers and strings here).
        low_value, high_value = low_node.args[0], high_node.args[0]
        kinds = _ORDERED[low_value.__class__]

        def between_literals(message: Message) -> bool | None:
            value = operand(message)
            if value.__class__ not in kinds:
                return None
            return (low_value <= value <= high_value) is not negated

        return between_literals
    low, high = _compile(low_node), _compile(high_node)

    def between(message: Message) -> bool | None:
        value = operand(message)
        if value is None:
            return None
        above = _compare(">=", value, low(message))
        if above is False:
            return negated
        below = _compare("<=", value, high(message))
        if below is False:
            return negated
        if above is None or below is None:
            return None
        return not negated

    return between


def _compile_string_test(negated: bool, test: Callable[[str], bool], operand: _Fn) -> _Fn:
    def string_test(message: Message) -> bool | None:
        value = operand(message)
        if value.__class__ is not str:
            return None
        return not test(value) if negated else test(value)

    return string_test


# --------------------------------------------------------------------------------------------------------------
# API


class Selector:
    """A compiled message selector: :meth:`matches` tells whether a message is selected.

    Attributes:
        text: the selector as written.
    """

    __slots__ = ("_evaluate", "text")

    def __init__(self, text: str, evaluate: _Fn) -> None:
        self.text = text
        self._evaluate = evaluate

    def matches(self, message: Message) -> bool:
        """Whether the selector is TRUE for the message (FALSE and unknown both mean not selected)."""
        return self._evaluate(message) is True

    def evaluate(self, message: Message) -> bool | None:
        """The selector's three-valued result for the message: True, False, or None for unknown."""
        value = self._evaluate(message)
        return value if isinstance(value, bool) else None

    def __repr__(self) -> str:
        return f"Selector({self.text!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Selector):
            return self.text == other.text
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.text)


def compile_selector(text: str) -> Selector:
    """Parse and compile a JMS message selector.

    Raises:
        SelectorError: the text is not a valid selector (condition ``amqp:invalid-field``); its description names
            the problem and its position (``SelectorError.position``, 0-based).
    """
    if not isinstance(text, str):
        raise SelectorError(f"a selector must be a string, got {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise SelectorError(
            f"selector is too long ({len(text)} characters, the limit is {MAX_LENGTH})", position=MAX_LENGTH
        )
    if len(text) <= _CACHED_LENGTH:
        return _compile_cached(text)
    return _compile_text(text)


# Consumers often share selectors: the compiled form of short ones is kept (selectors are immutable).
_CACHED_LENGTH: Final = 1024


@lru_cache(maxsize=256)
def _compile_cached(text: str) -> Selector:
    return _compile_text(text)


def _compile_text(text: str) -> Selector:
    tokens = _Lexer(text).run()
    tree = _Parser(text, tokens).parse()
    return Selector(text, _compile(tree))
