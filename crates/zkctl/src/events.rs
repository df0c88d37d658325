//! Watch events that fire after their command ended: in the shell, `get -w`
//! and `ls -w` give the prompt back at once (as zkCli does) and their event
//! is shown when it fires.
//!
//! rustyline's own external printer is not used: while one exists, keys
//! that reach it together (a pasted line, typing ahead while a command runs)
//! stall in its input buffer until the next key is pressed. Instead an event
//! is printed at once while a command runs, or over an idle prompt (the
//! prompt is redrawn below it); while a line is being typed it is held, so
//! the line is never garbled, and shown as soon as the line is entered.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex, PoisonError};

/// Where the shell is, as far as printing an event goes.
enum Phase {
    /// A command runs (or the shell is between prompts): print plainly.
    Busy,
    /// The prompt is shown, in raw mode.
    Prompt {
        /// The prompt, to redraw below a printed event.
        prompt: String,
        /// The line being edited is not empty: hold events.
        typing: bool,
    },
}

struct State {
    phase: Phase,
    held: Vec<String>,
}

/// The shell's outlet for late watch events; clones share it.
#[derive(Clone)]
pub struct LateEvents {
    state: Arc<Mutex<State>>,
    /// Both ends are a terminal, so the prompt can be redrawn; otherwise
    /// (input piped) events are printed plainly.
    terminal: bool,
}

impl LateEvents {
    /// An outlet for a shell on this process's stdin and stdout.
    pub fn new() -> LateEvents {
        let terminal = std::io::stdin().is_terminal() && std::io::stdout().is_terminal();
        LateEvents { state: Arc::new(Mutex::new(State { phase: Phase::Busy, held: Vec::new() })), terminal }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic elsewhere leaves the state consistent (every update is one assignment).
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Shows one event line (and any held ones): now, unless a line is being typed.
    pub fn show(&self, line: String) {
        let mut state = self.lock();
        let (prompt, typing) = match &state.phase {
            Phase::Prompt { prompt, typing } if self.terminal => (Some(prompt.clone()), *typing),
            _ => (None, false),
        };
        if typing {
            state.held.push(line);
            return;
        }
        let mut lines = std::mem::take(&mut state.held);
        lines.push(line);
        let mut out = std::io::stdout().lock();
        // A closed terminal is not worth an error of its own.
        let _ = match prompt {
            // Raw mode: no newline translation. Clear the prompt's row, print
            // the events there, and draw the prompt again below them, where
            // the editor (its cursor at the end of the empty line) goes on.
            Some(prompt) => write!(out, "\r\x1b[2K{}\r\n{prompt}", lines.join("\r\n")),
            None => writeln!(out, "{}", lines.join("\n")),
        };
        let _ = out.flush();
    }

    /// The prompt is about to be shown.
    pub fn prompting(&self, prompt: &str) {
        self.lock().phase = Phase::Prompt { prompt: prompt.to_string(), typing: false };
    }

    /// Whether the line being edited is non-empty (the editor tells on every redraw).
    pub fn typing(&self, typing: bool) {
        if let Phase::Prompt { typing: now, .. } = &mut self.lock().phase {
            *now = typing;
        }
    }

    /// The prompt is gone (a line was entered): events held meanwhile are shown now.
    pub fn busy(&self) {
        let mut state = self.lock();
        state.phase = Phase::Busy;
        let held = std::mem::take(&mut state.held);
        let mut out = std::io::stdout().lock();
        for line in held {
            let _ = writeln!(out, "{line}");
        }
        let _ = out.flush();
    }
}
