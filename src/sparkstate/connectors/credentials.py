"""Credentials kept out of every line sparkstate prints or stores: :func:`mask`, the one
function that shows a source's or sink's URL (or connection string), and masks the messages
that may repeat one.

A password may hold any character, and one that holds ``/``, ``?``, ``#``, ``@`` or a space
is not a URL that parses (``postgresql://app:S3cr/et@db/prod``): what is masked cannot
depend on how the URL parses, so the rules are about where a credential *may* be:

* after ``scheme://`` (or a mistyped ``scheme:/``, ``scheme//``), everything up to the last
  ``@`` is the user's part, whatever it holds; a plain ``user:password`` keeps the user
  (``app:***@db``), anything else is hidden whole (``***@db``);
* the value of a setting whose name says it is a secret (``password``, ``sslpassword``,
  ``sasl.password``, ``...secret``, ``...token``...), in a query (``?password=``, up to the
  next ``&name=``: the value may hold ``&``, ``#``, spaces), in a keyword string
  (``password=...``, ``password = '...'``) or in a printed mapping (``'sasl.password': '...'``).

When two readings disagree (``?password=p@ss`` could end a user's part), both are masked:
a URL of an odd shape may show less than it could, never a secret.

This module does not import pyspark (Spark's Python workers and the unit tests run it).
"""

from __future__ import annotations

import re
from urllib.parse import unquote, unquote_plus

#: a setting (libpq's, librdkafka's) whose value is a secret: ``password``, ``sslpassword``,
#: ``sasl.password``, ``ssl.key.password``, ``sasl.oauthbearer.client.secret``, a token, a private key
_SECRET_NAME = re.compile(r"pass(word|wd)|secret|token|credential|private|key\.pem|oauthbearer\.config", re.IGNORECASE)
#: what a user name may hold to be shown: RFC 3986's userinfo characters but ``:``
_PLAIN_USER = re.compile(r"[A-Za-z0-9\-._~%!$&'()*+,;=]*")
#: a URL's start: ``scheme://``, or a mistyped ``scheme:/`` or ``scheme//``
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*(?::/+|/{2,})")
#: a text that starts as a URL may (``kafka:app:pw@host``): its first word ends in ``:``
_SCHEME_WORD = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:")
#: where a query's next parameter starts: an ``&`` before a name and ``=``; any other ``&``
#: belongs to the value before it (a password may hold one)
_NEXT_PARAMETER = r"&(?=[\w.%+\-]+=)"
#: ``?name=value`` / ``&name=value``: the value runs to the next parameter (or the end)
_QUERY_SETTING = re.compile(rf"(?<=[?&])([^=&?#\s]+)=((?:(?!{_NEXT_PARAMETER}).)*)", re.DOTALL)
#: ``name=value``, ``name = 'quoted \' value'``, ``'name': 'value'`` outside a query
_KEYWORD_SETTING = re.compile(
    r"""(?<![\w.%\-?&])([\w.%\-]+)['"]?(?:\s*=\s*|:(?=[\s'"])\s*)(\*\*\*|'(?:\\.|[^'\\])*'?|"(?:\\.|[^"\\])*"?|\S*)"""
)
#: a keyword/value connection string (``host=db password=...``), which has no user's part
_KEYWORD_STRING = re.compile(r"\s*[\w.\-]+\s*=")


def mask(text: str) -> str:
    """``text`` (a URL or connection string as given, or a message holding one) with every
    credential it may hold replaced by ``***``; see the module's rules."""
    if not isinstance(text, str):
        return text
    spans = _user_parts(text) + _secret_values(text)
    if not spans:
        return text
    out, pos = [], 0
    for start, end in _merged([s for s in spans if s[1] > s[0]]):
        out.append(text[pos:start])
        out.append("***")
        pos = end
    out.append(text[pos:])
    return "".join(out)


#: the fixed words libpq's messages quote (``missing "=" after``): kept by :func:`mask_quoted`
_QUOTED_WORDS = ('"="', '"]"', '":"', '"/"')


def mask_quoted(message: str) -> str:
    """A library's ``message`` about a URL it could not read (libpq's) with the text it quotes
    hidden: the quoted text is a piece of the URL, which may be a piece of a password. On each
    line, all from the first quote to the last is hidden, as a password may hold quotes."""
    words = {f"\x00{i}\x00": word for i, word in enumerate(_QUOTED_WORDS)}
    for placeholder, word in words.items():
        message = message.replace(word, placeholder)
    message = re.sub(r'"[^\n]*"', '"***"', message)
    for placeholder, word in words.items():
        message = message.replace(placeholder, word)
    return message


def split_query(query: str) -> list[str]:
    """A URL's ``query`` in its parameters (``name=value``, as written), split as :func:`mask`
    reads it: a value runs to the next ``&name=``, so that a password holding ``&`` stays whole."""
    return [piece for piece in re.split(_NEXT_PARAMETER, query) if piece]


def query_parameters(query: str) -> list[tuple[str, str]]:
    """A URL's ``query`` as decoded (name, value) pairs, split by :func:`split_query`."""
    return [(unquote_plus(name), unquote_plus(value)) for name, _, value in (p.partition("=") for p in split_query(query))]


def is_secret(name: str) -> bool:
    """Whether a setting named ``name`` (percent-encoded or not) holds a secret."""
    return bool(_SECRET_NAME.search(unquote(name)))


def _user_parts(text: str) -> list[tuple[int, int]]:
    """The spans of the user's parts (``user:password`` before an ``@``) to hide."""
    starts = [m.end() for m in re.finditer("://", text)]
    spans = []
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(text)
        spans += _user_part(text, start, text.rfind("@", start, end))
    head = text[: starts[0]] if starts else text
    if "@" not in head or (not starts and _KEYWORD_STRING.match(head)):
        return spans
    if starts or (any(c.isspace() for c in head) and not _SCHEME.match(head) and not _SCHEME_WORD.match(head)):
        # words of a message: each one with an ``@`` is a ``user:password@host`` of its own
        for word in re.finditer(r"\S+", head):
            start = word.start() + len(word.group()) - len(word.group().lstrip("'\"(<[{"))
            scheme = _SCHEME.match(text, start)
            spans += _user_part(text, scheme.end() if scheme else start, text.rfind("@", start, word.end()))
    else:  # one URL without ``://`` (``kafka:/app:pw@host``, ``app:pw@host:9092``): the text is its own
        scheme = _SCHEME.match(head)
        spans += _user_part(text, scheme.end() if scheme else 0, text.rfind("@"))
    return spans


def _user_part(text: str, start: int, at: int) -> list[tuple[int, int]]:
    """What to hide of ``text[start:at]``, the user's part before an ``@`` (``at`` < 0: none)."""
    if at < start:
        return []
    part = text[start:at]
    user, colon, _ = part.partition(":")
    if _PLAIN_USER.fullmatch(user) and not re.search(r"[/?#\s]", part):
        return [(start + len(user) + 1, at)] if colon else []  # a user alone is no secret
    return [(start, at)]


def _secret_values(text: str) -> list[tuple[int, int]]:
    """The spans of the values of secret settings, in a query and elsewhere."""
    spans = [m.span(2) for m in _QUERY_SETTING.finditer(text) if is_secret(m.group(1))]
    spans += [m.span(2) for m in _KEYWORD_SETTING.finditer(text) if is_secret(m.group(1)) and m.group(2)]
    return spans


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` sorted, overlapping or touching ones made one."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out
