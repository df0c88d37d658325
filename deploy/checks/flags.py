"""Command lines and variables: every flag a deployment file passes to
zabkeeper or zkctl must be in that binary's `--help` (for zkctl, the help of
the subcommand it is given to, which must be a whole command), and every
ZABKEEPER_*/ZKCTL_* variable it sets must be one the binaries read. Shell
scripts (`sh -c`, or a script file a container runs) are read for the
zabkeeper and zkctl command lines in them.
"""

import os
import re
import shlex
import subprocess

from .common import clean_env

# ZABKEEPER_<X> variables the binary reads itself rather than as config keys
# (crates/config/src/overrides.rs's NOT_KEYS).
BINARY_ENV = {"CONFIG", "ID", "LOG", "JOIN"}


class Help:
    """What one command's `--help` says it takes."""

    OPTION = re.compile(r"^(?:-(?P<short>[A-Za-z0-9])(?:,\s*)?)?(?:--(?P<long>[A-Za-z0-9][\w-]*))?(?P<value>[ =]\[?<[^>]+>)?")

    def __init__(self, text):
        self.longs, self.shorts, self.subcommands, self.envs = {}, {}, set(), set()
        section = None
        for line in text.splitlines():
            if re.match(r"^[A-Z][\w ]*:\s*$", line):
                section = line.strip().rstrip(":")
                continue
            if section == "Commands":
                m = re.match(r"^  ([a-z][\w-]*)(\s|$)", line)
                if m:
                    self.subcommands.add(m.group(1))
                continue
            self.envs.update(re.findall(r"\[env: ([A-Z0-9_]+)", line))
            stripped = line.strip()
            if stripped.startswith("-"):
                m = self.OPTION.match(stripped)
                if m and (m.group("short") or m.group("long")):
                    takes_value = bool(m.group("value"))
                    if m.group("long"):
                        self.longs[m.group("long")] = takes_value
                    if m.group("short"):
                        self.shorts[m.group("short")] = takes_value


class Binaries:
    def __init__(self, paths):
        self.paths = paths  # name -> Path
        self.helps = {}

    def help(self, name, path=()):
        key = (name, tuple(path))
        if key not in self.helps:
            cmd = [str(self.paths[name]), *path, "--help"]
            out = subprocess.run(cmd, capture_output=True, text=True, env=clean_env(), timeout=30)
            if out.returncode != 0:
                raise RuntimeError(f"`{' '.join([name, *path, '--help'])}` exited {out.returncode}: {out.stderr.strip()}")
            self.helps[key] = Help(out.stdout)
        return self.helps[key]


def parse_invocation(binaries, argv):
    """Walks argv of zabkeeper or zkctl as clap would: returns the subcommand
    path, {flag: [values]} and the flags its help does not list."""
    name = os.path.basename(argv[0])
    path, flags, unknown = [], {}, []
    help = binaries.help(name)
    i = 1
    while i < len(argv):
        token = argv[i]
        if token == "--":
            break
        if token.startswith("--"):
            flag, eq, value = token[2:].partition("=")
            takes_value = help.longs.get(flag)
            if takes_value is None:
                unknown.append((f"--{flag}", " ".join([name, *path])))
            elif takes_value and not eq:
                i += 1
                value = argv[i] if i < len(argv) else None
            flags.setdefault(f"--{flag}", []).append(value if takes_value else None)
        elif token.startswith("-") and len(token) > 1 and not re.fullmatch(r"-\d+", token):
            for j, ch in enumerate(token[1:]):
                takes_value = help.shorts.get(ch)
                if takes_value is None:
                    unknown.append((f"-{ch}", " ".join([name, *path])))
                    continue
                if takes_value:
                    rest = token[2 + j:]
                    if not rest:
                        i += 1
                        rest = argv[i] if i < len(argv) else None
                    flags.setdefault(f"-{ch}", []).append(rest)
                    break
                flags.setdefault(f"-{ch}", []).append(None)
        elif token in help.subcommands:
            path.append(token)
            help = binaries.help(name, path)
        i += 1
    return path, flags, unknown


SHELLS = {"sh", "bash", "dash"}
SEPARATORS = {"|", "||", "&&", ";", "&", "(", ")", ";;", "|&"}
REDIRECTIONS = {"<", ">", ">>", "<>", ">&", "<&", "&>", "&>>", ">|"}


def script_commands(script):
    """The simple commands of a shell script, each as its words (redirections
    dropped), split at pipes, lists and subshells."""
    lexer = shlex.shlex(script, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands, current = [], []
    tokens = list(lexer)
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if token in SEPARATORS:
            commands.append(current)
            current = []
        elif token in REDIRECTIONS:
            if current and current[-1].isdigit():
                current.pop()
            i += 1  # the redirection's target
        else:
            current.append(token)
        i += 1
    commands.append(current)
    result = []
    for words in commands:
        while words and (words[0] in ("exec", "command", "!") or re.match(r"^[A-Za-z_]\w*=", words[0])):
            words = words[1:]
        if words:
            result.append(words)
    return result


# Words after which a shell word is still a command name.
COMMAND_PREFIXES = {"exec", "command", "!", "if", "then", "else", "elif", "while", "until", "do", "{", "time"}
BINARIES = ("zabkeeper", "zkctl")


def script_lines(script):
    """(line number, text) of a script's code lines: continuation lines
    joined, blank lines and whole-line comments left out."""
    result, current, start = [], "", None
    for number, line in enumerate(script.splitlines(), 1):
        if not current and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if start is None:
            start = number
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        result.append((start, current + line))
        current, start = "", None
    if current:
        result.append((start, current))
    return result


def script_invocations(script):
    """The zabkeeper and zkctl command lines of a whole shell script, each as
    (line number, words), and what the reading could not follow. Each code
    line is split as the shell would split its words (quotes, pipes, lists,
    `$(...)`); a binary's name is a command where a command may start. A name
    inside a quoted `$(...)` or backquotes, or a line that does not split, is
    reported rather than skipped, so no command line goes unchecked."""
    found, problems = [], []
    for number, line in script_lines(script):
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = ""  # `${x##*-}` is no comment; whole-line comments are gone
        try:
            tokens = list(lexer)
        except ValueError as e:
            problems.append(f"line {number}: cannot split it into words ({e})")
            continue
        at_command, current = True, None
        i = 0
        while i < len(tokens):
            token = tokens[i]
            if token.startswith("#"):  # a trailing comment (a quoted "#..." word would end it too)
                break
            if re.search(r"(\$\(|`)\s*(\S*/)?(%s)\b" % "|".join(BINARIES), token):
                problems.append(f"line {number}: a command substitution inside a quoted word runs {token!r}: unchecked")
            if token in SEPARATORS:
                if current:
                    found.append((number, current))
                at_command, current = True, None
            elif token in REDIRECTIONS:
                if current and current[-1].isdigit():
                    current.pop()
                i += 1
            elif current is not None:
                current.append(token)
            elif at_command and (token in COMMAND_PREFIXES or re.match(r"^[A-Za-z_]\w*=", token)):
                pass
            elif at_command and os.path.basename(token) in BINARIES:
                current = [token]
            else:
                at_command = False
            i += 1
        if current:
            found.append((number, current))
    return found, problems


def invocations(argv):
    """The zabkeeper/zkctl command lines within argv: argv itself, or the
    commands of a `sh -c SCRIPT`."""
    if not argv:
        return []
    name = os.path.basename(argv[0])
    if name in SHELLS and "-c" in argv[1:]:
        i = argv.index("-c")
        if i + 1 < len(argv):
            return [words for words in script_commands(argv[i + 1]) if os.path.basename(words[0]) in ("zabkeeper", "zkctl")]
        return []
    if name in ("zabkeeper", "zkctl"):
        return [list(argv)]
    return []


class CommandLines:
    """Every command line the deployment files run, checked against --help."""

    def __init__(self, binaries, report):
        self.binaries = binaries
        self.report = report
        self.seen = 0

    def check(self, where, argv):
        """Checks argv (or the commands of its shell script); returns the
        parsed invocations as (argv, subcommand path, flags)."""
        return self.check_words(where, invocations(argv))

    def check_script(self, where, script):
        """Checks the command lines of a whole shell script; returns them
        parsed, as check does."""
        found, problems = script_invocations(script)
        for problem in problems:
            self.report.fail(f"{where}: {problem}")
        return self.check_words(where, [words for _, words in found], [f"line {n}: " for n, _ in found])

    def check_words(self, where, commands, prefixes=None):
        parsed = []
        for k, words in enumerate(commands):
            at = f"{where}: {prefixes[k]}" if prefixes else f"{where}: "
            self.seen += 1
            shown = shlex.join(words)
            try:
                path, flags, unknown = parse_invocation(self.binaries, words)
            except (RuntimeError, subprocess.SubprocessError, OSError) as e:
                self.report.fail(f"{at}cannot check `{shown}`: {e}")
                continue
            name = os.path.basename(words[0])
            command = " ".join([name, *path])
            needs = sorted(self.binaries.help(name, path).subcommands - {"help"}) if path else []
            if needs:
                self.report.fail(f"{at}`{shown}`: `{command}` needs one of its subcommands ({', '.join(needs)})")
            if unknown:
                for flag, command in unknown:
                    self.report.fail(f"{at}`{shown}`: {flag} is not a flag of `{command}` (not in its --help)")
            elif not needs:
                used = " ".join(sorted(flags)) or "no flags"
                self.report.ok(f"{at}`{shown}`: {used} accepted by `{command} --help`")
            parsed.append((words, path, flags))
        return parsed

    def check_env(self, where, names, keys):
        """ZABKEEPER_*/ZKCTL_* variables must be ones the binaries read:
        `keys` are the config's (configs.ConfigKeys)."""
        for name in names:
            if name.startswith("ZKCTL_"):
                envs = set()
                try:
                    envs = self.binaries.help("zkctl").envs
                except (RuntimeError, OSError) as e:
                    self.report.fail(f"{where}: cannot read zkctl --help: {e}")
                self.report.check(name in envs, f"{where}: {name} is read by zkctl",
                                  f"{where}: {name} is not a variable zkctl reads (its --help lists {', '.join(sorted(envs))})")
            elif name.startswith("ZABKEEPER_"):
                tail = name[len("ZABKEEPER_"):]
                m = re.fullmatch(r"SERVER_(\d+)_(\w+)", tail)
                if tail in BINARY_ENV:
                    envs = self.binaries.help("zabkeeper").envs
                    self.report.check(name in envs, f"{where}: {name} is read by zabkeeper",
                                      f"{where}: {name} is not read by this zabkeeper (its --help lists {', '.join(sorted(envs))})")
                elif m:
                    self.report.check(m.group(2).lower() in keys.member, f"{where}: {name} overrides member key {m.group(2).lower()}",
                                      f"{where}: {name}: {m.group(2).lower()} is not a [[server]] key")
                elif tail.startswith("TLS_"):
                    key = tail[len("TLS_"):].lower()
                    self.report.check(key in keys.tls, f"{where}: {name} overrides [tls] key {key}",
                                      f"{where}: {name}: {key} is not a [tls] key (the server would refuse to start)")
                else:
                    # SERVER and TLS are sections, set one key at a time.
                    self.report.check(tail.lower() in keys.top and tail not in ("SERVER", "TLS"), f"{where}: {name} overrides key {tail.lower()}",
                                      f"{where}: {name}: {tail.lower()} is not a config key (the server would refuse to start)")


def flag_value(flags, name):
    values = flags.get(name) or []
    return values[-1] if values else None


def server_invocation(parsed):
    for words, path, flags in parsed:
        if os.path.basename(words[0]) == "zabkeeper":
            return flags
    return None
