"""Reading an entry's curl sample as the shell and curl read it: the one request it makes, and
what would make it run otherwise; and the credential form an `authExample` describes, so lint
can hold the sample to the rest of the entry without running it."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from urllib.parse import SplitResult, parse_qsl, urlsplit

# curl's own option table (its tool_getparam.c), by long name: those that take an argument, the
# switches, and the letters of the short forms.
_WITH_ARGUMENT_NAMES = """
    abstract-unix-socket alt-svc aws-sigv4 cacert capath cert cert-type ciphers config
    connect-timeout connect-to continue-at cookie cookie-jar create-file-mode crlfile curves
    data data-ascii data-binary data-raw data-urlencode delegation dns-interface dns-ipv4-addr
    dns-ipv6-addr dns-servers doh-url dump-header ech egd-file engine etag-compare etag-save
    expect100-timeout form form-string ftp-account ftp-alternative-to-user ftp-method ftp-port
    ftp-ssl-ccc-mode happy-eyeballs-timeout-ms haproxy-clientip header help hostpubmd5
    hostpubsha256 hsts interface ip-tos ipfs-gateway json keepalive-cnt keepalive-time key
    key-type knownhosts krb krb4 libcurl limit-rate local-port login-options mail-auth
    mail-from mail-rcpt max-filesize max-redirs max-time netrc-file noproxy oauth2-bearer
    output output-dir parallel-max parallel-max-host pass pinnedpubkey preproxy proto
    proto-default proto-redir proxy proxy-cacert proxy-capath proxy-cert proxy-cert-type
    proxy-ciphers proxy-crlfile proxy-header proxy-key proxy-key-type proxy-pass
    proxy-pinnedpubkey proxy-service-name proxy-tls13-ciphers proxy-tlsauthtype
    proxy-tlspassword proxy-tlsuser proxy-user proxy1.0 pubkey quote random-file range rate
    referer request request-target resolve retry retry-delay retry-max-time sasl-authzid
    service-name sigalgs socks4 socks4a socks5 socks5-gssapi-service socks5-hostname
    speed-limit speed-time ssl-sessions stderr telnet-option tftp-blksize time-cond tls-max
    tls13-ciphers tlsauthtype tlspassword tlsuser trace trace-ascii trace-config unix-socket
    upload-file upload-flags url url-query user user-agent variable vlan-priority write-out
"""
_SWITCH_NAMES = """
    alpn anyauth append basic buffer ca-native cert-status clobber compressed compressed-ssh
    create-dirs crlf digest disable disable-eprt disable-epsv disallow-username-in-url
    doh-cert-status doh-insecure dump-ca-embed eprt epsv fail fail-early fail-with-body
    false-start follow form-escape ftp-create-dirs ftp-pasv ftp-pret ftp-skip-pasv-ip ftp-ssl
    ftp-ssl-ccc ftp-ssl-control ftp-ssl-reqd get globoff haproxy-protocol head http0.9 http1.0
    http1.1 http2 http2-prior-knowledge http3 http3-only ignore-content-length include insecure
    ipv4 ipv6 junk-session-cookies keepalive list-only location location-trusted
    mail-rcpt-allowfails manual metalink mptcp negotiate netrc netrc-optional next npn ntlm
    ntlm-wb out-null parallel parallel-immediate path-as-is post301 post302 post303
    progress-bar progress-meter proxy-anyauth proxy-basic proxy-ca-native proxy-digest
    proxy-http2 proxy-insecure proxy-negotiate proxy-ntlm proxy-ssl-allow-beast
    proxy-ssl-auto-client-cert proxy-tlsv1 proxytunnel raw remote-header-name remote-name
    remote-name-all remote-time remove-on-error retry-all-errors retry-connrefused sasl-ir
    sessionid show-error show-headers silent skip-existing socks5-basic socks5-gssapi
    socks5-gssapi-nec ssl ssl-allow-beast ssl-auto-client-cert ssl-no-revoke ssl-reqd
    ssl-revoke-best-effort sslv2 sslv3 styled-output suppress-connect-headers tcp-fastopen
    tcp-nodelay tftp-no-options tls-earlydata tlsv1 tlsv1.0 tlsv1.1 tlsv1.2 tlsv1.3 tr-encoding
    trace-ids trace-time use-ascii verbose version xattr
"""
_SHORT_NAMES = """
    a=append N=buffer E=cert K=config C=continue-at b=cookie c=cookie-jar d=data q=disable
    D=dump-header f=fail F=form P=ftp-port G=get g=globoff I=head H=header h=help 0=http1.0
    k=insecure 4=ipv4 6=ipv6 j=junk-session-cookies l=list-only L=location M=manual m=max-time
    n=netrc :=next o=output Z=parallel #=progress-bar x=proxy U=proxy-user p=proxytunnel
    Q=quote r=range e=referer J=remote-header-name O=remote-name R=remote-time X=request
    S=show-error i=show-headers s=silent Y=speed-limit y=speed-time 2=sslv2 3=sslv3
    t=telnet-option z=time-cond 1=tlsv1 T=upload-file B=use-ascii u=user A=user-agent v=verbose
    V=version w=write-out
"""
_WITH_ARGUMENT = frozenset(_WITH_ARGUMENT_NAMES.split())
_SWITCHES = frozenset(_SWITCH_NAMES.split())
_SHORT = dict(pair.split("=") for pair in _SHORT_NAMES.split())  # letter → long name
# Options that send the request somewhere its URL does not say: another host, address or path.
_ELSEWHERE = frozenset({"proxy", "preproxy", "proxy1.0", "socks4", "socks4a", "socks5",
                        "socks5-hostname", "resolve", "connect-to", "unix-socket",
                        "abstract-unix-socket", "request-target", "doh-url", "dns-servers"})
# Options whose argument, starting with `@`, is a file curl reads what it sends from.
_FROM_FILE = frozenset({"data", "data-ascii", "data-binary", "json", "header"})
_BODY = frozenset({"data", "data-raw", "data-binary", "data-ascii", "data-urlencode", "json"})
_FORM = frozenset({"form", "form-string"})
# Options that print something of curl's own and end it before any request is made.
_NO_REQUEST = {"help": "-h", "version": "-V", "manual": "-M"}
_GLOB = re.compile(r"[{}[\]]")  # what curl reads in a URL as a pattern, one request per value
# A header as curl sends it: a field name (RFC 9110 token), a colon, a value.
HEADER = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+:[ \t]*\S.*", re.DOTALL)
URL = re.compile(r"https?://\S+", re.IGNORECASE)  # a word curl takes for a URL, as it sends it


@dataclass
class CurlRequest:
    """What one curl command sends: its method, URLs, headers, basic-auth user and fields."""

    method: str | None = "GET"  # None where curl refuses the command for asking for two
    urls: list[str] = field(default_factory=list)
    strays: list[str] = field(default_factory=list)  # words curl would also take for URLs
    headers: list[str] = field(default_factory=list)  # as written after -H
    user: str | None = None  # -u / --user
    bearer: str | None = None  # --oauth2-bearer
    fields: list[tuple[str, str]] = field(default_factory=list)  # sent by -d, -F, --url-query …
    problems: list[str] = field(default_factory=list)  # what curl refuses, or the sample hides

    def header_fields(self) -> list[tuple[str, str]]:
        """Each well-formed header as (lower-case name, value)."""
        return [(name.strip().lower(), value.strip())
                for name, _, value in (text.partition(":") for text in self.headers
                                       if HEADER.fullmatch(text))]

    def cookies(self) -> list[tuple[str, str]]:
        """Each cookie sent, from -b or a Cookie header, as (name, value)."""
        return cookie_pairs(value for name, value in self.header_fields() if name == "cookie")


def cookie_pairs(values: Iterable[str]) -> list[tuple[str, str]]:
    """The cookies of Cookie header values (`a=1; b=2`), as (name, value)."""
    return [(name.strip(), value.strip()) for text in values for pair in text.split(";")
            for name, equals, value in [pair.partition("=")] if equals]


def parse_curl(words: list[str], expanded: list[str] | None = None) -> CurlRequest:
    """The request a curl command (already split into shell words, `curl` first) makes, as curl
    reads it, with what in it curl would refuse or that sends what the sample does not show.
    `expanded` are the words with each shell expansion taken out, where curl finds a pattern:
    bash fills `${LAT}` before curl reads its braces."""
    request = CurlRequest()
    seen: set[str] = set()
    explicit: str | None = None
    for name, argument in _options(words, request):
        seen.add(name)
        if name == "request":
            explicit = argument  # sent as written: a method is case-sensitive
        elif name == "next":
            _note(request.problems, "'--next' starts a second request: a sample is one request")
        elif name in _NO_REQUEST:
            _note(request.problems, f"'--{name}' ({_NO_REQUEST[name]}) makes curl print its "
                  f"{name} and stop, making no request: drop it")
        elif argument is not None:
            _read_argument(request, name, argument)
    if conflict := _method_conflict(seen):
        _note(request.problems, conflict)
        request.method = None  # curl sends nothing: the one line above says why
    else:
        request.method = explicit or _implied_method(seen)
    urls = request.urls if expanded is None else parse_curl(expanded).urls
    if "globoff" not in seen and any(_GLOB.search(url) for url in urls):
        _note(request.problems, "curl reads '{…}' and '[…]' in a URL as a pattern, one request "
              "for each value: write the value, or add -g (--globoff)")
    return request


def _implied_method(seen: set[str]) -> str:
    """The method the options `seen` ask for, where they ask for one: -G moves only -d's
    fields into the query, so with -F alone curl still sends a form POST, -G ignored."""
    if "head" in seen:
        return "HEAD"
    if seen & _FORM:
        return "POST"
    if seen & _BODY:
        return "GET" if "get" in seen else "POST"
    return "PUT" if "upload-file" in seen else "GET"


def _method_conflict(seen: set[str]) -> str | None:
    """Why curl refuses the command for asking for two methods, if it does: -I asks for HEAD,
    -T for a PUT of the file, -F for a form POST, and -d (or --json …) for a POST, or with -G
    for a GET (HEAD with -I) that sends its fields in the query (curl's `SetHTTPrequest`)."""
    asked: dict[str, str] = {}  # each method asked for → the options that ask for it
    if "head" in seen:
        asked["HEAD"] = "-I"
    if "upload-file" in seen:
        asked["PUT"] = "-T"
    if seen & _FORM:
        asked.setdefault("a form POST", "-F")
    if seen & _BODY:
        method = ("HEAD" if "head" in seen else "GET") if "get" in seen else "POST"
        asked.setdefault(method, "-G with -d" if "get" in seen else "-d or --json")
    if len(asked) < 2:
        return None
    both = " and ".join(f"{method} ({options})" for method, options in asked.items())
    return f"curl refuses a command that asks for both {both}: a request has one method"


def _options(words: list[str], request: CurlRequest) -> Iterator[tuple[str, str | None]]:
    """Each option of a curl command as (long name, argument or None), as curl reads the
    words; the words that are no option go to `request` as URLs, and so does each problem."""
    index, options_ended = 1, False
    while index < len(words):
        word, following = words[index], words[index + 1] if index + 1 < len(words) else None
        index += 1
        if options_ended or not word.startswith("-"):
            if URL.fullmatch(word):
                request.urls.append(_url_as_sent(word))
            else:
                request.strays.append(word)
        elif word == "--":
            options_ended = True  # curl takes every word after it for a URL
        else:
            options = (_long_option(word[2:], following, request.problems)
                       if word.startswith("--") else
                       _short_options(word[1:], following, request.problems))
            for name, argument, takes_next in options:
                index += takes_next
                yield name, argument


Option = tuple[str, str | None, int]  # long name, argument, 1 where it is the next word


def _long_option(text: str, following: str | None, problems: list[str]) -> list[Option]:
    """`--name`, `--name value`, `--no-name` or `--name=value` (curl 8.16 and later only), as
    curl reads it."""
    name, equals, attached = text.partition("=")
    if name.startswith("no-") and name[3:] in _SWITCHES:
        return []  # a switch turned off, as it is by default
    if name.startswith("expand-") and name[7:] in _WITH_ARGUMENT:
        _note(problems, f"'--{name}' fills its argument from '--variable' values, so the "
              "sample does not show what it sends: write it out")
        name = name[7:]
    if name not in _WITH_ARGUMENT and name not in _SWITCHES:
        _note(problems, f"curl has no option {shown('--' + name, 40)}")
        return []
    if equals:
        _note(problems, f"'--{name}=…' needs curl 8.16 or later (older curl refuses it as an "
              f"unknown option): write '--{name} VALUE'")
    if name in _SWITCHES:
        return [(name, None, 0)]
    if equals:
        return [(name, attached, 0)]
    return [(name, _argument(name, following, problems), 1 if following is not None else 0)]


def _short_options(letters: str, following: str | None, problems: list[str]) -> list[Option]:
    """`-sS`, `-XPOST`, `-H value`: letters each naming a switch, up to one that takes an
    argument, which is the rest of the word or else the next word."""
    options: list[Option] = []
    for position, letter in enumerate(letters):
        name = _SHORT.get(letter)
        if name is None:
            _note(problems, f"curl has no option {shown('-' + letter)}")
            return options
        if name not in _WITH_ARGUMENT:
            options.append((name, None, 0))
        elif rest := letters[position + 1:]:
            return [*options, (name, rest, 0)]
        else:
            takes_next = 1 if following is not None else 0
            return [*options, (name, _argument(name, following, problems), takes_next)]
    if not letters:
        _note(problems, "curl has no option '-'")
    return options


def _argument(name: str, following: str | None, problems: list[str]) -> str:
    """The next word, the argument of option `name`; curl refuses the command without one."""
    if following is None:
        _note(problems, f"'--{name}' needs an argument: curl refuses the command without one")
    return following or ""


def _read_argument(request: CurlRequest, name: str, argument: str) -> None:
    """Note in `request` what option `name` with `argument` sends, or why the sample does not
    show it."""
    if name in _ELSEWHERE:
        _note(request.problems, f"'--{name}' sends the request elsewhere than its URL says "
              "(another host, address or path): drop it")
    elif name in ("config", "variable"):
        _note(request.problems, f"'--{name}' takes options or values from a file or the "
              "environment, so the sample does not show what it sends: write them in it")
    elif _reads_file(name, argument):
        _note(request.problems, f"'--{name} {shown(argument, 40)[1:-1]}' reads what it sends "
              "from a local file, so the sample does not show it: write it in the sample")
    elif name in ("header", "user-agent", "cookie"):  # curl sends -A and -b as these headers
        request.headers.append(argument if name == "header" else
                               f"User-Agent: {argument}" if name == "user-agent" else
                               f"Cookie: {argument}")
    elif name == "user":
        request.user = argument
    elif name == "oauth2-bearer":
        request.bearer = argument
    elif name == "url":
        request.urls.append(_url_as_sent(argument))
    elif name in _BODY - {"json"} or name == "url-query":  # -G sends them in the query
        request.fields += parse_qsl(argument.removeprefix("+"), keep_blank_values=True)
    elif name in _FORM:
        form_name, _, value = argument.partition("=")
        request.fields.append((form_name, value))


def _reads_file(name: str, argument: str) -> bool:
    """Whether option `name` reads what it sends from a local file named in `argument`:
    `-d @body.json`, `-H @headers.txt`; `--data-urlencode` and `--url-query` (but for one
    starting with `+`, sent as is) with `@file` or `name@file`; `-b` with no `=`."""
    if name in _FROM_FILE:
        return argument.startswith("@")
    if name == "data-urlencode" or (name == "url-query" and not argument.startswith("+")):
        return "@" in argument.partition("=")[0]
    return name == "cookie" and "=" not in argument


def shown(text: str, limit: int = 80) -> str:
    """`text` quoted for a lint line, cut short, a byte that is no UTF-8 as `\\xff`: a problem
    is one readable line, also when the sample holds a word of 100,000 characters."""
    quoted = repr(text if len(text) <= limit else text[:limit] + "…")
    return _QUOTED_BYTE.sub(r"\1\\x\2", quoted)


# A byte that is no UTF-8, as a word holds it (a lone surrogate) and as `repr` writes that.
RAW_BYTE = re.compile("[\udc80-\udcff]")
_QUOTED_BYTE = re.compile(r"(?<!\\)((?:\\\\)*)\\udc([89a-f][0-9a-f])")


def printable(text: str) -> str:
    """`text` with each byte that is no UTF-8 written `\\xff`, so a line holding it can be
    stored and printed."""
    return RAW_BYTE.sub(lambda byte: f"\\x{ord(byte.group()) - 0xDC00:02x}", text)


def raw_byte(text: str) -> str | None:
    """The first byte of `text` that is no UTF-8 (`$'\\xff'`), as `\\xff`: curl sends it as it
    is, outside a URL's path."""
    byte = RAW_BYTE.search(text)
    return None if byte is None else printable(byte.group())


def _url_as_sent(url: str) -> str:
    """`url` as curl sends it: each byte that is no UTF-8 in its path percent-encoded, as curl
    writes it (`/a%ff`); one in its host or query is sent as it is, which the lint refuses."""
    if RAW_BYTE.search(url) is None:
        return url
    host = url.find("//") + 2
    path = min((index for index in (url.find(mark, host) for mark in "/?#") if index >= 0),
               default=len(url))
    end = min((index for index in (url.find(mark, path) for mark in "?#") if index >= 0),
              default=len(url))
    encoded = RAW_BYTE.sub(lambda byte: f"%{ord(byte.group()) - 0xDC00:02x}", url[path:end])
    return url[:path] + encoded + url[end:]


@dataclass
class ShellCommand:
    """A sample as a POSIX shell reads it, with bash's `$'…'` (a browser copies a request as
    curl so) read as bash and zsh read it: its words, and what makes the shell run something
    other than the one command those words spell."""

    words: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # Each parameter the shell expands, as written (`$API_KEY`, `${API_KEY}`, `$1`): the words
    # keep it as written, a placeholder, but a fresh shell puts its value there, empty if unset.
    variables: list[str] = field(default_factory=list)
    # The words with each such expansion taken out: what curl reads in them as its own (a
    # `{…}` pattern in a URL) is never in a variable's `${…}`, which the shell fills first.
    expanded: list[str] = field(default_factory=list)
    # Each word holding a `~` bash replaces with a directory of the reader's machine.
    homes: list[str] = field(default_factory=list)


# One piece of shell text at a time: outside quotes, the shell ends a word at a blank or a line
# break, stops at an operator, runs `$(…)` and backticks, and joins lines at a backslash.
_SHELL_PIECE = re.compile(r"""
    (?P<blank>[ \t]+)
  | (?P<newline>\n)
  | \\(?P<escaped>[\s\S])
  | '(?P<single>[^']*)'
  | \$'(?P<ansi>(?:[^'\\]++|\\[\s\S])*+)'
  | \$?"(?P<double>(?:[^"\\]++|\\[\s\S])*+)"
  | (?P<substitution>\$\(|`)
  | (?P<operator>[|&;()<>])
  | (?P<plain>(?:[^ \t\n\\'"|&;()<>`$]|\$(?![('"]))+)
""", re.VERBOSE)
# What a backslash stands for inside bash's `$'…'` (ANSI-C quoting), as bash reads it.
_ANSI_ESCAPE = re.compile(r"\\(?:([0-7]{1,3})|x([0-9A-Fa-f]{1,2})|u([0-9A-Fa-f]{1,4})"
                          r"|U([0-9A-Fa-f]{1,8})|c([\s\S])|([\s\S]))")
_ANSI_LETTERS = {"a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n",
                 "r": "\r", "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}
_DOUBLE_ESCAPE = re.compile(r'\\([$`"\\\n])')  # what a backslash escapes inside "…"
_DOUBLE_SUBSTITUTION = re.compile(r"(?<!\\)(?:\\\\)*(?:\$\(|`)")  # not escaped
_WILDCARD = re.compile(r"[*?[]")
# A parameter the shell expands outside single quotes, where no backslash escapes its `$`: a
# name, `${…}`, a digit or a special parameter (`$$`, `$?`…).
_EXPANSION = re.compile(r"(?<!\\)(?:\\\\)*(\$(?:\{[^}]*\}?|[A-Za-z_]\w*|[0-9$?#@*!-]))")
# A tilde-prefix bash replaces with a directory, given the text it starts (each quoted piece of
# the word one NUL, as no prefix holding a quoted character is replaced): `~` (the reader's
# home), `~+`, `~-`, `~0` (the current or last directory) or `~name` (that user's home), ended
# by a `/`, a `:` or the word's end.
_TILDE = re.compile(r"~(?:[+-]?0*|[A-Za-z0-9._][A-Za-z0-9._-]*)(?=[/:]|$)")
# A word bash reads as an assignment (`name=…`, `name+=…`, `name[i]=…`), also as an argument:
# it replaces a tilde-prefix after its first `=` and after each `:` that follows.
_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*(?:\[[^]\0]*\])?\+?=")
_LINE_BREAK = ("line {} ends without a backslash, so the shell runs the next line as another "
               "command: end it with '\\' or join the lines")


def read_shell(text: str) -> ShellCommand:
    """`text` as the shell splits it into words; a ValueError for an open quote or a trailing
    backslash, which leave the shell waiting for more."""
    text = text.strip()
    command = ShellCommand()
    problems = command.problems
    word: _Word | None = None  # the pieces of the word being read
    position = 0
    while position < len(text):
        piece = _SHELL_PIECE.match(text, position)
        if piece is None:
            quote = text[position + (text[position] == "$")]
            raise ValueError(f"the {quote} on line {text.count(chr(10), 0, position) + 1}"
                             " is never closed" if quote in "'\"" else
                             "it ends with a backslash that escapes nothing")
        position, kind = piece.end(), piece.lastgroup or ""
        if kind in ("blank", "newline") and word is not None:
            word.end(command)
            word = None
        if kind == "newline":
            _note(problems, _LINE_BREAK.format(text.count("\n", 0, piece.start()) + 1))
        elif kind in ("substitution", "operator"):
            _note(problems, _shell_problem(piece.group(kind)))
        elif kind == "plain" and word is None and piece.group(kind).startswith("#"):
            _note(problems, "'#' starts a shell comment: the shell drops the rest of the line")
            end_of_line = text.find("\n", position)
            position = len(text) if end_of_line < 0 else end_of_line
        elif kind != "blank" and (kind, piece.group(kind)) != ("escaped", "\n"):
            word = word if word is not None else _Word()
            word.add(kind, piece.group(kind), command)
    if word is not None:
        word.end(command)
    if command.homes:
        _note(problems, f"{shown(command.homes[0], 40)}{and_more(command.homes)} holds a '~' "
              "that bash replaces with a directory of the reader's machine (at a word's start, "
              "or after '=' or ':' in a name=value word: '~' their home, '~name' that user's, "
              "'~+' the current one), so each reader's run sends or writes their own path: "
              "quote it, or write the value itself")
    return command


@dataclass
class _Word:
    """One word as the shell reads it, piece by piece: its text, its text with each expansion
    taken out, and its unquoted text (each quoted piece a NUL), where bash finds a `~`."""

    text: list[str] = field(default_factory=list)
    expanded: list[str] = field(default_factory=list)
    unquoted: list[str] = field(default_factory=list)

    def add(self, kind: str, value: str, command: ShellCommand) -> None:
        """Add a piece of `kind` written `value`, noting in `command` what the shell does
        with it."""
        text = _word_text(kind, value, command.problems)
        self.text.append(text)
        self.unquoted.append(value if kind == "plain" else "\0")
        expansions = list(_EXPANSION.finditer(value)) if kind in ("plain", "double") else []
        command.variables += [expansion.group(1) for expansion in expansions]
        self.expanded.append(_word_text(kind, _EXPANSION.sub(_escapes_before, value), [])
                             if expansions else text)

    def end(self, command: ShellCommand) -> None:
        """Add the word to `command`."""
        text = "".join(self.text)
        command.words.append(text)
        command.expanded.append("".join(self.expanded))
        if _home_dependent("".join(self.unquoted)):
            command.homes.append(text)


def _escapes_before(expansion: re.Match[str]) -> str:
    """The backslashes before an expansion, each escaping the next: what stays of it when the
    expansion is taken out."""
    return expansion.group()[:expansion.start(1) - expansion.start()]


def _home_dependent(unquoted: str) -> bool:
    """Whether bash replaces a tilde-prefix in a word whose unquoted text is `unquoted`: at its
    start, or, in a word it reads as an assignment, after the first `=` or a `:` after it."""
    if _TILDE.match(unquoted):
        return True
    assignment = _ASSIGNMENT.match(unquoted)
    if assignment is None:
        return False
    value = unquoted[assignment.end():]
    starts = [0] + [index + 1 for index, character in enumerate(value) if character == ":"]
    return any(_TILDE.match(value, start) for start in starts)


def _word_text(kind: str, value: str, problems: list[str]) -> str:
    """What a piece of a word stands for once the shell has read it, noting in `problems` what
    the shell would do with it besides."""
    if kind == "double":
        if _DOUBLE_SUBSTITUTION.search(value):
            _note(problems, _shell_problem("$("))
        return _DOUBLE_ESCAPE.sub(lambda match: match.group(1).strip("\n"), value)
    if kind == "ansi":
        return _ansi_text(value)
    if kind == "plain" and (wildcard := _WILDCARD.search(value)):
        _note(problems, f"{wildcard.group()!r} outside quotes is a shell wildcard (zsh refuses "
              "the command when no file matches it): quote the word")
    return value


def _ansi_text(value: str) -> str:
    """What `$'…'` holds once bash has read it: bytes, each `\\xHH` or octal code one byte and
    a `\\u` code its UTF-8, read as the UTF-8 text curl is given. A byte that is no UTF-8
    stays a byte (a lone surrogate, U+DC80 + the byte, as Python's `surrogateescape` keeps
    it), for curl sends it as it is. bash ends the text at a NUL."""
    text, position = bytearray(), 0
    for escape in _ANSI_ESCAPE.finditer(value):
        text += value[position:escape.start()].encode("utf-8", "surrogatepass")
        text += _ansi_bytes(escape)
        position = escape.end()
    text += value[position:].encode("utf-8", "surrogatepass")
    return text.partition(b"\0")[0].decode("utf-8", "surrogateescape")


def _ansi_bytes(escape: re.Match[str]) -> bytes:
    """What one backslash escape in `$'…'` writes, as bash reads it: an octal or hex code (one
    byte, 0x80 and above too), a Unicode code (its UTF-8), a control character (`\\cA`), a
    letter of C's (`\\n`, `\\t`, `\\'`); any other is kept as written."""
    octal, hexadecimal, short, long, control, letter = escape.groups()
    if octal or hexadecimal:
        return bytes([int(octal, 8) & 0xFF if octal else int(hexadecimal, 16)])
    if letter is not None:
        character = _ANSI_LETTERS.get(letter, escape.group())
    elif control is not None:
        character = "\x7f" if control == "?" else chr(ord(control.upper()) & 0x1F)
    else:
        code = int(short or long, 16)
        character = escape.group() if code > 0x10FFFF or 0xD800 <= code <= 0xDFFF else chr(code)
    return character.encode("utf-8", "surrogatepass")


def _shell_problem(token: str) -> str:
    """Why a shell operator or substitution outside quotes has no place in a sample."""
    if token in ("$(", "`"):
        return ("runs a command ($(…) or `…`) when pasted: a sample sends only what it shows; "
                "use a placeholder such as YOUR_API_KEY")
    return (f"{token!r} outside quotes is a shell operator, so the shell does not pass the rest "
            "to curl as written: quote the word that holds it, or drop it")


def and_more(items: list[str]) -> str:
    """How many more than the first of `items` a lint line speaks for: thousands of bad words
    are one line, not thousands."""
    return f" (and {len(items) - 1:,} more)" if len(items) > 1 else ""


def _note(problems: list[str], problem: str) -> None:
    """Record `problem` once: a sample of thousands of `;` is one line."""
    if problem not in problems:
        problems.append(problem)


@dataclass
class CredentialForm:
    """Where an `authExample` puts the credential: header names (with the scheme word an
    Authorization-like header starts with), query or form parameter names, or basic auth."""

    headers: dict[str, str | None] = field(default_factory=dict)  # lower-case name → scheme
    params: set[str] = field(default_factory=set)
    cookies: set[str] = field(default_factory=set)
    basic: bool = False
    known: bool = True  # False where the example is a URL or prose this reading cannot place


_SCHEME = re.compile(r"([A-Za-z][\w-]*)\s+\S")
_PLACEHOLDERISH = re.compile(r"YOUR_|<|\{|\$")
_HEADER_SPLIT = re.compile(r",\s*(?=[A-Za-z0-9-]+:\s)")
_PARAMS = re.compile(r"\??[\w.-]+=[^\s&]*(?:&[\w.-]+=[^\s&]*)*")


_CURL_OPTIONS = re.compile(r"--?[A-Za-z]")  # an authExample of curl options alone: `-u KEY:`


def curl_command(text: str) -> ShellCommand | None:
    """`text` as the shell reads it, `curl` first, where it is a curl command or curl options
    alone (an authExample's `-u KEY:`); None for other text, or text the shell cannot read."""
    text = text.strip()
    if not text.startswith("curl ") and not _CURL_OPTIONS.match(text):
        return None
    try:
        command = read_shell(text)
    except ValueError:
        return None
    if command.words[:1] != ["curl"]:
        command.words.insert(0, "curl")
        command.expanded.insert(0, "curl")
    return command


def curl_request(text: str) -> CurlRequest | None:
    """The request `text` makes where it is a curl command, or curl options alone; None for
    other text, or text the shell cannot read."""
    command = curl_command(text)
    return None if command is None else parse_curl(command.words, command.expanded)


def example_request(example: str) -> CurlRequest | None:
    """What `example` (an entry's authExample) sends: a curl command or curl options alone, a
    query (`?appid=KEY`) or header lines (`X-Key: KEY, X-Sign: <signature>`); None for a URL,
    prose, or text the shell cannot read."""
    text = example.strip()
    if text.startswith("curl ") or _CURL_OPTIONS.match(text):
        return curl_request(text)
    if "://" in text:
        return None
    if _PARAMS.fullmatch(text):
        return CurlRequest(fields=parse_qsl(text.lstrip("?"), keep_blank_values=True))
    parts = [part.strip() for part in _HEADER_SPLIT.split(text)]
    return CurlRequest(headers=parts) if all(HEADER.fullmatch(part) for part in parts) else None


def split_url(url: str) -> tuple[SplitResult | None, str]:
    """`url` in its parts, or None and why it does not split (an open `[`, a host in brackets
    that is no IPv6 address), which the lint's URL rule says: the other readers pass over it."""
    try:
        return urlsplit(url), ""
    except ValueError as exc:
        return None, str(exc)


def query_fields(request: CurlRequest) -> list[tuple[str, str]]:
    """Every parameter `request` sends: its URLs' queries, then its -d, -F and --url-query
    fields."""
    pairs: list[tuple[str, str]] = []
    for url in request.urls:
        if (parts := split_url(url)[0]) is not None:
            pairs += parse_qsl(parts.query, keep_blank_values=True)
    return pairs + request.fields


def credential_form(example: str) -> CredentialForm:
    """The form `example` (an entry's authExample) describes."""
    request = example_request(example)
    if request is None:
        return CredentialForm(known=False)
    form = _header_form(request.header_fields(), CredentialForm(basic=request.user is not None))
    form.params = {name for name, _ in query_fields(request)}
    form.basic = form.basic or "basic" in {(scheme or "").lower()
                                           for scheme in form.headers.values()}
    return form


def _header_form(fields: list[tuple[str, str]], form: CredentialForm) -> CredentialForm:
    """`form` with the credential headers `fields` name, a Cookie header's as cookies."""
    for name, value in fields:
        if name == "cookie":
            form.cookies |= {cookie for cookie, _ in cookie_pairs([value])}
        else:
            form.headers[name] = credential_scheme(value)
    return form


def credential_scheme(value: str) -> str | None:
    """The scheme word a credential header's value starts with (`Bearer`, `Token`,
    `DeepL-Auth-Key`), where the value is a word then the credential."""
    match = _SCHEME.match(value)
    if match is None or _PLACEHOLDERISH.match(match.group(1)):
        return None
    return match.group(1)
