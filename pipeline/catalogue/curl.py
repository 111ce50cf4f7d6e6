"""Reading an entry's curl sample: the one request it makes, and the credential form an
`authExample` describes, so lint can hold the sample to the rest of the entry without running it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlsplit

# curl options that take an argument; the ones the sample rules read are named below.
_SHORT_WITH_ARGUMENT = frozenset("XHdFuAebowmxTrEKPQtUyYzcDC")
_LONG_WITH_ARGUMENT = frozenset({
    "--request", "--header", "--data", "--data-raw", "--data-binary", "--data-ascii",
    "--data-urlencode", "--json", "--form", "--form-string", "--user", "--user-agent",
    "--referer", "--cookie", "--output", "--write-out", "--max-time", "--connect-timeout",
    "--proxy", "--upload-file", "--url", "--oauth2-bearer", "--retry", "--cacert", "--cert",
    "--key", "--resolve", "--connect-to", "--limit-rate", "--range", "--config", "--dump-header",
    "--cookie-jar", "--interface", "--variable", "--url-query", "--aws-sigv4", "--proto",
})
_BODY = frozenset({"-d", "--data", "--data-raw", "--data-binary", "--data-ascii",
                   "--data-urlencode", "--json"})
_FORM = frozenset({"-F", "--form", "--form-string"})
# A header as curl sends it: a field name (RFC 9110 token), a colon, a value.
HEADER = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+:[ \t]*\S.*", re.DOTALL)
URL = re.compile(r"https?://\S+")  # any word curl takes for a URL, as curl sends it


@dataclass
class CurlRequest:
    """What one curl command sends: its method, URLs, headers, basic-auth user and fields."""

    method: str = "GET"
    urls: list[str] = field(default_factory=list)
    strays: list[str] = field(default_factory=list)  # words curl would also take for URLs
    headers: list[str] = field(default_factory=list)  # as written after -H
    user: str | None = None  # -u / --user
    bearer: str | None = None  # --oauth2-bearer
    fields: list[str] = field(default_factory=list)  # names sent by -d / -F / --data-urlencode

    def header_fields(self) -> list[tuple[str, str]]:
        """Each well-formed header as (lower-case name, value)."""
        return [(name.strip().lower(), value.strip())
                for name, _, value in (text.partition(":") for text in self.headers
                                       if HEADER.fullmatch(text))]


def parse_curl(words: list[str]) -> CurlRequest:
    """The request a curl command (already split into shell words, `curl` first) makes."""
    request = CurlRequest()
    explicit: str | None = None
    body = get = head = upload = False
    index = 1
    while index < len(words):
        word = words[index]
        index += 1
        option, argument = word, None
        if word.startswith("--"):
            option, equals, attached = word.partition("=")
            if option in _LONG_WITH_ARGUMENT:
                argument = attached if equals else (words[index] if index < len(words) else "")
                index += 0 if equals else 1
        elif word.startswith("-") and len(word) > 1:
            for position, letter in enumerate(word[1:], start=1):
                if letter in _SHORT_WITH_ARGUMENT:
                    option = "-" + letter
                    argument = word[position + 1:] or (words[index] if index < len(words) else "")
                    index += 0 if word[position + 1:] else 1
                    break
                get = get or letter == "G"
                head = head or letter == "I"
        else:
            (request.urls if URL.fullmatch(word) else request.strays).append(word)
            continue
        if argument is None:
            get = get or option == "--get"
            head = head or option == "--head"
            continue
        if option in ("-X", "--request"):
            explicit = argument.upper()
        elif option in ("-H", "--header"):
            request.headers.append(argument)
        elif option in ("-u", "--user"):
            request.user = argument
        elif option == "--oauth2-bearer":
            request.bearer = argument
        elif option == "--url":
            request.urls.append(argument)
        elif option in ("-A", "--user-agent"):
            request.headers.append(f"User-Agent: {argument}")
        elif option in ("-T", "--upload-file"):
            upload = True
        elif option in _BODY | _FORM:
            body = True
            if option != "--json" and not argument.startswith("@"):
                request.fields += [name for name, _ in parse_qsl(argument, keep_blank_values=True)
                                   ] if option in _BODY else [argument.partition("=")[0]]
    implied = "HEAD" if head else "GET" if get else "POST" if body else "PUT" if upload else "GET"
    request.method = explicit or implied
    if get and request.fields and request.urls:  # -G sends the fields in the query
        request.fields = []
    return request


@dataclass
class ShellCommand:
    """A sample as a POSIX shell reads it: its words, and what makes the shell run something
    other than the one command those words spell."""

    words: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


# One piece of shell text at a time: outside quotes, the shell ends a word at a blank or a line
# break, stops at an operator, runs `$(…)` and backticks, and joins lines at a backslash.
_SHELL_PIECE = re.compile(r"""
    (?P<blank>[ \t]+)
  | (?P<newline>\n)
  | \\(?P<escaped>[\s\S])
  | '(?P<single>[^']*)'
  | "(?P<double>(?:[^"\\]++|\\[\s\S])*+)"
  | (?P<substitution>\$\(|`)
  | (?P<operator>[|&;()<>])
  | (?P<plain>(?:[^ \t\n\\'"|&;()<>`$]|\$(?!\())+)
""", re.VERBOSE)
_DOUBLE_ESCAPE = re.compile(r'\\([$`"\\\n])')  # what a backslash escapes inside "…"
_DOUBLE_SUBSTITUTION = re.compile(r"(?<!\\)(?:\\\\)*(?:\$\(|`)")  # not escaped
_WILDCARD = re.compile(r"[*?[]")
_LINE_BREAK = ("line {} ends without a backslash, so the shell runs the next line as another "
               "command: end it with '\\' or join the lines")


def read_shell(text: str) -> ShellCommand:
    """`text` as the shell splits it into words; a ValueError for an open quote or a trailing
    backslash, which leave the shell waiting for more."""
    text = text.strip()
    command = ShellCommand()
    word: list[str] | None = None  # the pieces of the word being read
    position = 0
    while position < len(text):
        piece = _SHELL_PIECE.match(text, position)
        if piece is None:
            raise ValueError(f"the {text[position]} on line {text.count(chr(10), 0, position) + 1}"
                             " is never closed" if text[position] in "'\"" else
                             "it ends with a backslash that escapes nothing")
        position, kind = piece.end(), piece.lastgroup or ""
        if kind in ("blank", "newline") and word is not None:
            command.words.append("".join(word))
            word = None
        if kind == "newline":
            _note(command, _LINE_BREAK.format(text.count("\n", 0, piece.start()) + 1))
        elif kind in ("substitution", "operator"):
            _note(command, _shell_problem(piece.group(kind)))
        elif kind == "plain" and word is None and piece.group(kind).startswith("#"):
            _note(command, "'#' starts a shell comment: the shell drops the rest of the line")
            end_of_line = text.find("\n", position)
            position = len(text) if end_of_line < 0 else end_of_line
        elif kind != "blank" and (kind, piece.group(kind)) != ("escaped", "\n"):
            word = word if word is not None else []
            word.append(_word_text(kind, piece.group(kind), command))
    if word is not None:
        command.words.append("".join(word))
    return command


def _word_text(kind: str, value: str, command: ShellCommand) -> str:
    """What a piece of a word stands for once the shell has read it, noting in `command` what
    the shell would do with it besides."""
    if kind == "double":
        if _DOUBLE_SUBSTITUTION.search(value):
            _note(command, _shell_problem("$("))
        return _DOUBLE_ESCAPE.sub(lambda match: match.group(1).strip("\n"), value)
    if kind == "plain" and (wildcard := _WILDCARD.search(value)):
        _note(command, f"{wildcard.group()!r} outside quotes is a shell wildcard (zsh refuses "
              "the command when no file matches it): quote the word")
    return value


def _shell_problem(token: str) -> str:
    """Why a shell operator or substitution outside quotes has no place in a sample."""
    if token in ("$(", "`"):
        return ("runs a command ($(…) or `…`) when pasted: a sample sends only what it shows; "
                "use a placeholder such as YOUR_API_KEY")
    return (f"{token!r} outside quotes is a shell operator, so the shell does not pass the rest "
            "to curl as written: quote the word that holds it, or drop it")


def _note(command: ShellCommand, problem: str) -> None:
    """Record `problem` once: a sample of thousands of `;` is one line."""
    if problem not in command.problems:
        command.problems.append(problem)


@dataclass
class CredentialForm:
    """Where an `authExample` puts the credential: header names (with the scheme word an
    Authorization-like header starts with), query or form parameter names, or basic auth."""

    headers: dict[str, str | None] = field(default_factory=dict)  # lower-case name → scheme
    params: set[str] = field(default_factory=set)
    basic: bool = False
    known: bool = True  # False where the example is a URL or prose this reading cannot place


_SCHEME = re.compile(r"([A-Za-z][\w-]*)\s+\S")
_PLACEHOLDERISH = re.compile(r"YOUR_|<|\{|\$")
_HEADER_SPLIT = re.compile(r",\s*(?=[A-Za-z0-9-]+:\s)")
_PARAMS = re.compile(r"\??[\w.-]+=[^\s&]*(?:&[\w.-]+=[^\s&]*)*")


def credential_form(example: str) -> CredentialForm:
    """The form `example` (an entry's authExample) describes."""
    text = example.strip()
    if text.startswith("curl "):
        try:
            request = parse_curl(read_shell(text).words)
        except ValueError:
            return CredentialForm(known=False)
        form = CredentialForm(basic=request.user is not None)
        for name, value in request.header_fields():
            form.headers[name] = _scheme(value)
        for url in request.urls:
            form.params |= {name for name, _ in parse_qsl(urlsplit(url).query)}
        return form
    if text.startswith(("-u ", "--user ")):
        return CredentialForm(basic=True)
    if "://" in text:
        return CredentialForm(known=False)
    if _PARAMS.fullmatch(text):
        return CredentialForm(params={name for name, _ in parse_qsl(text.lstrip("?"))})
    form = CredentialForm()
    for part in _HEADER_SPLIT.split(text):
        name, colon, value = part.partition(":")
        if not colon or not HEADER.fullmatch(part.strip()):
            return CredentialForm(known=False)
        scheme = _scheme(value.strip())
        form.headers[name.strip().lower()] = scheme
        form.basic = form.basic or (scheme or "").lower() == "basic"
    return form


def _scheme(value: str) -> str | None:
    """The scheme word a credential header's value starts with (`Bearer`, `Token`,
    `DeepL-Auth-Key`), where the value is a word then the credential."""
    match = _SCHEME.match(value)
    if match is None or _PLACEHOLDERISH.match(match.group(1)):
        return None
    return match.group(1)
