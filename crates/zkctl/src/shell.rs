//! `zkctl` with no command: an interactive shell in the manner of zkCli.sh.
//! One session for the whole shell (so `addauth` and `create -e` last until
//! it ends), line editing and history (rustyline; the history file is
//! `$ZKCTL_HISTORY`, else `~/.zkctl_history`), and tab completion of
//! commands and of paths (children read from the ensemble as you type).
//! Every one-shot command works inside with the same flags, plus `connect
//! SERVERS`, `help` and `quit`/`exit`. One difference, as in zkCli: `get -w`
//! and `ls -w` give the prompt back at once, and the watch's event is
//! printed when it fires (see `events`). Data from stdin (`-`) is refused:
//! stdin is the terminal; `--file` works.

use crate::events::LateEvents;
use crate::output::{Exit, Printer};
use crate::Command;
use clap::{CommandFactory, Parser, Subcommand};
use rustyline::completion::Completer;
use rustyline::error::ReadlineError;
use rustyline::hint::Hinter;
use rustyline::history::FileHistory;
use rustyline::{Context, Editor, Helper, Highlighter, Validator};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use zabkeeper_client::{Client, ClientOptions};

/// One line typed at the shell.
#[derive(Parser, Debug)]
#[command(name = "", no_binary_name = true, disable_version_flag = true)]
struct Line {
    #[command(subcommand)]
    command: ShellCommand,
}

#[derive(Subcommand, Debug)]
enum ShellCommand {
    /// Close this session and open one to other servers.
    Connect {
        /// host:port[,host:port...] (gRPC addresses).
        server: String,
    },
    /// Leave the shell (the session ends, and its ephemeral nodes with it).
    #[command(alias = "exit")]
    Quit,
    #[command(flatten)]
    Run(Command),
}

/// The shell's editor helper: completes commands and paths, and tells the
/// late-event printer whether a line is being typed.
#[derive(Helper, Highlighter, Validator)]
struct Completions {
    events: LateEvents,
    commands: Vec<String>,
    client: Arc<Mutex<Option<Client>>>,
    runtime: tokio::runtime::Handle,
}

impl Completer for Completions {
    type Candidate = String;

    fn complete(&self, line: &str, pos: usize, _ctx: &Context<'_>) -> rustyline::Result<(usize, Vec<String>)> {
        let before = &line[..pos];
        let start = before.rfind(char::is_whitespace).map_or(0, |i| i + 1);
        let word = &before[start..];
        if before[..start].trim().is_empty() {
            let found = self.commands.iter().filter(|c| c.starts_with(word)).cloned().collect();
            return Ok((start, found));
        }
        if !word.starts_with('/') {
            return Ok((start, Vec::new()));
        }
        let (parent, prefix) = match word.rfind('/') {
            Some(0) => ("/", &word[1..]),
            Some(i) => (&word[..i], &word[i + 1..]),
            None => return Ok((start, Vec::new())),
        };
        let client = self.client.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        let Some(client) = client else { return Ok((start, Vec::new())) };
        // The prompt runs on a blocking thread while the runtime is driven by
        // the shell's loop, so the lookup can wait on it.
        let children = self.runtime.block_on(client.get_children(parent)).unwrap_or_default();
        let base = if parent == "/" { String::new() } else { parent.to_string() };
        let mut found: Vec<String> =
            children.into_iter().filter(|c| c.starts_with(prefix)).map(|c| format!("{base}/{c}")).collect();
        found.sort();
        Ok((start, found))
    }
}

impl Hinter for Completions {
    type Hint = String;

    /// Shows no hint; called on every edit of the line, which is how the
    /// shell knows whether an event may be printed over the prompt.
    fn hint(&self, line: &str, _pos: usize, _ctx: &Context<'_>) -> Option<String> {
        self.events.typing(!line.is_empty());
        None
    }
}

fn history_file() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("ZKCTL_HISTORY") {
        return Some(PathBuf::from(path));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".zkctl_history"))
}

/// Every command name the shell knows, for completion.
fn command_names() -> Vec<String> {
    let mut names: Vec<String> = Line::command().get_subcommands().map(|c| c.get_name().to_string()).collect();
    names.extend(["exit".to_string(), "help".to_string()]);
    names.sort();
    names
}

async fn connect(server: &str, options: &ClientOptions, out: &Printer) -> Option<Client> {
    match Client::connect(server, options.clone()).await {
        Ok(client) => Some(client),
        Err(e) => {
            out.fail(&e);
            None
        }
    }
}

/// Runs the shell until quit or end of input; the exit status is the last
/// command's.
pub async fn run(mut server: String, options: ClientOptions, admin: crate::AdminTarget, mut out: Printer) -> Exit {
    let shared = Arc::new(Mutex::new(connect(&server, &options, &out).await));
    let config = rustyline::Config::builder().auto_add_history(true).max_history_size(10_000).unwrap_or_default();
    let mut editor: Editor<Completions, FileHistory> = match Editor::with_config(config.build()) {
        Ok(editor) => editor,
        Err(e) => {
            eprintln!("Error: cannot start the line editor: {e}");
            return Exit::Usage;
        }
    };
    let events = LateEvents::new();
    out.events = Some(events.clone());
    editor.set_helper(Some(Completions {
        events: events.clone(),
        commands: command_names(),
        client: shared.clone(),
        runtime: tokio::runtime::Handle::current(),
    }));
    let history = history_file();
    if let Some(path) = &history {
        let _ = editor.load_history(path);
    }
    let editor = Arc::new(Mutex::new(editor));
    let mut last = Exit::Ok;
    loop {
        let connected = shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner).is_some();
        let prompt = format!("[zkctl: {server}{}] ", if connected { "" } else { " (not connected)" });
        let reading = editor.clone();
        events.prompting(&prompt);
        let read = tokio::task::spawn_blocking(move || {
            reading.lock().unwrap_or_else(std::sync::PoisonError::into_inner).readline(&prompt)
        })
        .await;
        events.busy();
        let line = match read {
            Ok(Ok(line)) => line,
            // Ctrl-C clears the line, as in zkCli.sh; Ctrl-D ends the shell.
            Ok(Err(ReadlineError::Interrupted)) => continue,
            Ok(Err(_)) | Err(_) => break,
        };
        let Some(words) = shlex::split(&line) else {
            eprintln!("Error: unbalanced quotes");
            last = Exit::Usage;
            continue;
        };
        if words.is_empty() {
            continue;
        }
        if words[0] == "help" {
            let _ = Line::command().print_long_help();
            continue;
        }
        let parsed = match Line::try_parse_from(&words) {
            Ok(parsed) => parsed,
            Err(e) => {
                let _ = e.print();
                last = Exit::Usage;
                continue;
            }
        };
        let client = shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        last = match parsed.command {
            ShellCommand::Quit => break,
            ShellCommand::Connect { server: next } => {
                if let Some(old) = client {
                    let _ = old.close().await;
                }
                let new = connect(&next, &options, &out).await;
                let ok = new.is_some();
                *shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = new;
                server = next;
                if ok {
                    Exit::Ok
                } else {
                    Exit::Connection
                }
            }
            ShellCommand::Run(Command::Admin(command)) => {
                crate::admin::run(&admin.address, &admin.options, admin.timeout, command, &out).await
            }
            ShellCommand::Run(command) => match client {
                Some(client) => crate::execute(&client, &out, command).await,
                None => {
                    eprintln!("Error: not connected (connect HOST:PORT[,HOST:PORT...])");
                    Exit::Connection
                }
            },
        };
    }
    if let Some(path) = &history {
        let _ = editor.lock().unwrap_or_else(std::sync::PoisonError::into_inner).save_history(path);
    }
    let client = shared.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    if let Some(client) = client {
        let _ = client.close().await;
    }
    last
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shell_line_takes_every_command_and_the_shell_s_own() {
        Line::command().debug_assert();
        assert!(matches!(
            Line::try_parse_from(["ls", "-R", "/a"]).map(|l| l.command),
            Ok(ShellCommand::Run(Command::Ls { recursive: true, .. }))
        ));
        assert!(matches!(
            Line::try_parse_from(["connect", "h:1"]).map(|l| l.command),
            Ok(ShellCommand::Connect { .. })
        ));
        assert!(matches!(Line::try_parse_from(["exit"]).map(|l| l.command), Ok(ShellCommand::Quit)));
        let names = command_names();
        for name in ["create", "get", "ls", "connect", "quit", "exit", "help", "admin"] {
            assert!(names.iter().any(|n| n == name), "{name} completes");
        }
    }
}
