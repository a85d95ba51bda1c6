"""What looks like a secret in a command line, and the command line with it blanked.

A leaf (it imports nothing of workflow_scripts): the config check refuses what `secret_name` and
`secret_text` find, and whatever records a server command passes it through `redact` first, so a
secret that got past the check is still written nowhere.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

REDACTED = "<redacted>"

# Words that make a flag, setting or variable name a secret's. `token` only as the last word:
# `hf_token` and `--token` hold one, `max_num_batched_tokens` and `long_prefill_token_threshold`
# do not.
_SECRET_WORDS = frozenset(
    {"apikey", "secret", "password", "passwd", "credential", "credentials", "authorization"}
)
_SECRET_PAIRS = frozenset(
    {("api", "key"), ("access", "key"), ("private", "key"), ("auth", "token")}
)
_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+")

# Strings that are secrets whatever they are called: the shapes of common API keys and tokens.
_TOKEN_SHAPES = (
    r"(?<![A-Za-z0-9])sk-[A-Za-z0-9_-]{16,}",  # OpenAI-style API keys
    r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{20,}",  # Hugging Face tokens
    r"(?<![A-Za-z0-9])gh[pousr]_[A-Za-z0-9]{20,}",  # GitHub tokens
    r"(?<![A-Za-z0-9])github_pat_[A-Za-z0-9_]{20,}",
    r"(?<![A-Za-z0-9])glpat-[A-Za-z0-9_-]{20,}",  # GitLab
    r"(?<![A-Za-z0-9])xox[abprs]-[A-Za-z0-9-]{10,}",  # Slack
    r"(?<![A-Za-z0-9])AKIA[0-9A-Z]{16}(?![A-Za-z0-9])",  # AWS access key ids
    r"(?<![A-Za-z0-9])eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}",  # JWTs
)
_TOKEN = re.compile("|".join(_TOKEN_SHAPES))
# `Authorization: Bearer x`, `Bearer x`, `Authorization: Basic x`: the credential after them (a
# bearer token of 8 or more token characters, RFC 6750's b64token: "the bearer of" is no header).
_BEARER = re.compile(r"(?i)\b(bearer\s+)(?!<redacted>)[A-Za-z0-9._~+/-]{8,}=*")
_AUTHORIZATION = re.compile(
    r"(?i)\b(authorization\s*[:=]\s*(?:(?:basic|bearer|token)\s+)?)"
    r"(?!<redacted>|(?:basic|bearer|token)\s)[^\s\"',;]+"
)
# `NAME=value` (a variable for `docker run -e`, or the environment before a command), and
# `Name: value` (a header, `--header "X-Api-Key: ..."`).
_ASSIGNMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.DOTALL)
_HEADER = re.compile(r"^([A-Za-z0-9-]+)(\s*:\s*)(.+)$", re.DOTALL)
# `"name": "value"` inside a JSON flag value (`--speculative-config '{...}'`).
_JSON_STRING_ITEM = re.compile(r'"([^"\\]+)"(\s*:\s*)"((?:[^"\\]|\\.)*)"')
_FLAG = re.compile(r"^--?[A-Za-z]")


def secret_name(name: str) -> bool:
    """A flag, setting, header or variable name that holds a secret (`api_key`, `--hf-token`,
    `LLAMA_API_KEY`, `ssl_keyfile_password`)."""
    words = [w.lower() for w in _WORD_SPLIT.split(name) if w]
    if not words:
        return False
    if words[-1] == "token" or any(w in _SECRET_WORDS for w in words):
        return True
    return any(pair in _SECRET_PAIRS for pair in zip(words, words[1:], strict=False))


def secret_text(text: str) -> str | None:
    """What makes a string a secret, or None: a token's shape, a bearer or Authorization
    credential, or `NAME=value` or a `Name: value` header with a secret's name."""
    if _TOKEN.search(text):
        return "a value shaped like an API key or token"
    if _BEARER.search(text) or _AUTHORIZATION.search(text):
        return "an Authorization credential"
    assignment = _ASSIGNMENT.match(text)
    if assignment and secret_name(assignment.group(1)):
        return f"the secret variable {assignment.group(1)} with its value"
    header = _HEADER.match(text)
    if header and secret_name(header.group(1)):
        return f"the secret header {header.group(1)} with its value"
    return None


def redact_text(text: str) -> str:
    """`text` with every token-shaped string and credential replaced by `<redacted>`."""
    assignment = _ASSIGNMENT.match(text)
    if assignment and secret_name(assignment.group(1)):
        return f"{assignment.group(1)}={REDACTED}"
    header = _HEADER.match(text)
    if header and secret_name(header.group(1)) and header.group(1).lower() != "authorization":
        return f"{header.group(1)}{header.group(2)}{REDACTED}"
    text = _TOKEN.sub(REDACTED, text)
    text = _AUTHORIZATION.sub(lambda m: m.group(1) + REDACTED, text)
    text = _BEARER.sub(lambda m: m.group(1) + REDACTED, text)

    def json_item(match: re.Match) -> str:
        if not secret_name(match.group(1)):
            return match.group(0)
        return f'"{match.group(1)}"{match.group(2)}"{REDACTED}"'

    return _JSON_STRING_ITEM.sub(json_item, text)


def redact(argv: Iterable[object]) -> list[str]:
    """A command line fit to record: the value of any secret-named flag (`--api-key v`,
    `--hf-token=v`) and of `NAME=v` with a secret's name, and any token-shaped string, become
    `<redacted>`. A secret-named flag followed by another flag is a switch: nothing to hide."""
    out: list[str] = []
    hide_next = False
    for token in map(str, argv):
        if hide_next and not _FLAG.match(token):
            out.append(REDACTED)
            hide_next = False
            continue
        hide_next = False
        if _FLAG.match(token):
            name, eq, value = token.lstrip("-").partition("=")
            prefix = token[: len(token) - len(value)]
            if secret_name(name):
                out.append(prefix + REDACTED if eq else token)
                hide_next = not eq
                continue
            if eq:
                out.append(prefix + redact_text(value))
                continue
        out.append(redact_text(token))
    return out
