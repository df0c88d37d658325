//! `multi --file F`: a file of write operations, one a line in zkctl's own
//! syntax (`create`, `set`, `delete`, `check`), applied as one ZooKeeper
//! multi, so all of them or none. Every line is parsed and checked before
//! anything is sent, and a bad one is named by its line number.

use super::commands::create_mode;
use super::input::{read_data, InputError, Stdin};
use super::output::{stat_json, Exit, Printer};
use crate::Command;
use clap::Parser;
use serde_json::json;
use std::path::Path;
use zabkeeper_client::acl_spec::parse_acl;
use zabkeeper_client::{Client, ClientError, MultiOp, MultiResult};

/// One operation of the file, with the line it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedOp {
    /// The line number, from 1.
    pub line: usize,
    /// The operation.
    pub op: MultiOp,
}

/// Why a file of operations was refused before anything was sent.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// The file (or stdin) could not be read.
    #[error(transparent)]
    Input(#[from] InputError),
    /// Operations are words split as a shell does, so the file must be text.
    #[error("{source_name} is not UTF-8 text")]
    NotText {
        /// The file's name or "stdin".
        source_name: String,
    },
    /// A line is not an operation zkctl can apply in a multi.
    #[error("{source_name} line {line}: {message}")]
    Line {
        /// The file's name or "stdin".
        source_name: String,
        /// The line number, from 1.
        line: usize,
        /// What is wrong with it.
        message: String,
    },
    /// Only blank lines and comments: most likely the wrong file.
    #[error("{source_name} has no operations")]
    Empty {
        /// The file's name or "stdin".
        source_name: String,
    },
}

/// An operation line: parsed with the CLI's own parser, so flags are the
/// same as those of the one-shot commands.
#[derive(Parser, Debug)]
#[command(name = "multi", no_binary_name = true, disable_version_flag = true, disable_help_flag = true)]
struct OpLine {
    #[command(subcommand)]
    command: Command,
}

/// Reads and checks the operations of `file` (`-`: stdin).
pub fn load(file: &Path, stdin: Stdin) -> Result<Vec<PlannedOp>, OpsError> {
    let source_name = if file == Path::new("-") { "stdin".to_string() } else { file.display().to_string() };
    let bytes = read_data(None, Some(file), stdin)?;
    let text = String::from_utf8(bytes).map_err(|_| OpsError::NotText { source_name: source_name.clone() })?;
    parse(&text, &source_name)
}

/// Parses the operations in `text`; blank lines and `#` comments are skipped.
pub fn parse(text: &str, source_name: &str) -> Result<Vec<PlannedOp>, OpsError> {
    let mut ops = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = index + 1;
        let trimmed = raw.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let op = parse_line(trimmed).map_err(|message| OpsError::Line {
            source_name: source_name.to_string(),
            line,
            message,
        })?;
        ops.push(PlannedOp { line, op });
    }
    if ops.is_empty() {
        return Err(OpsError::Empty { source_name: source_name.to_string() });
    }
    Ok(ops)
}

/// The first line of a clap error, without its `error: ` prefix (the usage
/// text after it is about the whole command line, not this op).
fn first_line(e: &clap::Error) -> String {
    let rendered = e.render().to_string();
    let first = rendered.lines().find(|l| !l.trim().is_empty()).unwrap_or("cannot parse the line");
    first.strip_prefix("error: ").unwrap_or(first).to_string()
}

/// Refuses stdin inside a file of operations: the file may itself be stdin,
/// and mixing the two would be ambiguous.
fn no_stdin(data: Option<&str>, file: Option<&Path>) -> Result<(), String> {
    if data == Some("-") || file == Some(Path::new("-")) {
        return Err("data from stdin (`-`) cannot be used in a multi; use --file FILE".into());
    }
    Ok(())
}

/// One operation from a non-blank line.
fn parse_line(line: &str) -> Result<MultiOp, String> {
    let words = shlex::split(line).ok_or("unbalanced quotes")?;
    let parsed = OpLine::try_parse_from(&words).map_err(|e| first_line(&e))?;
    Ok(match parsed.command {
        Command::Create { ephemeral, sequential, container, ttl, acl, path, data, file } => {
            no_stdin(data.as_deref(), file.as_deref())?;
            let mode = create_mode(ephemeral, sequential, container, ttl.is_some())?;
            let acl = parse_acl(&acl).map_err(|e| e.to_string())?;
            let data = read_data(data.as_deref(), file.as_deref(), Stdin::Terminal).map_err(|e| e.to_string())?;
            match ttl {
                Some(ms) => MultiOp::create_ttl(&path, &data, mode, &acl, std::time::Duration::from_millis(ms)),
                None => MultiOp::create(&path, &data, mode, &acl),
            }
        }
        Command::Set { version, path, data, file } => {
            no_stdin(data.as_deref(), file.as_deref())?;
            let data = read_data(data.as_deref(), file.as_deref(), Stdin::Terminal).map_err(|e| e.to_string())?;
            MultiOp::set_data(&path, &data, version)
        }
        Command::Delete { version, path } => MultiOp::delete(&path, version),
        Command::Check { version, path } => MultiOp::check(&path, version),
        _ => {
            let name = words.first().map_or("", String::as_str);
            return Err(format!("`{name}` cannot be part of a multi (create, set, delete, check)"));
        }
    })
}

/// The op's name as the file spells it.
fn op_name(op: &MultiOp) -> &'static str {
    match op {
        MultiOp::Create { .. } => "create",
        MultiOp::SetData { .. } => "set",
        MultiOp::Delete { .. } => "delete",
        MultiOp::Check { .. } => "check",
    }
}

/// Applies the operations as one multi and prints each one's result; on
/// failure names the line whose op failed (nothing was applied).
pub async fn run(client: &Client, out: &Printer, ops: &[PlannedOp]) -> Result<Exit, ClientError> {
    let multi_ops: Vec<MultiOp> = ops.iter().map(|p| p.op.clone()).collect();
    let results = match client.multi(&multi_ops).await {
        Ok(results) => results,
        Err(ClientError::MultiFailed { index, error, results }) => {
            let Some(failed) = ops.get(index) else {
                return Err(ClientError::MultiFailed { index, error, results });
            };
            let place = format!(
                "multi not applied, line {} ({} {}) failed",
                failed.line,
                op_name(&failed.op),
                failed.op.path()
            );
            let e = ClientError::Server(error);
            return Ok(out.fail_in(&e, &place, json!({ "line": failed.line, "op": index })));
        }
        Err(e) => return Err(e),
    };
    for (planned, result) in ops.iter().zip(&results) {
        let (line, name, path) = (planned.line, op_name(&planned.op), planned.op.path());
        match (result, out.json) {
            (MultiResult::Created { path, stat }, true) => {
                out.doc(json!({ "line": line, "op": name, "path": path, "stat": stat_json(stat) }))
            }
            (MultiResult::Created { path, .. }, false) => out.line(&format!("created {path}")),
            (MultiResult::DataSet(stat), true) => {
                out.doc(json!({ "line": line, "op": name, "path": path, "stat": stat_json(stat) }))
            }
            (MultiResult::DataSet(stat), false) => out.line(&format!("set {path} (version {})", stat.version)),
            (_, true) => out.doc(json!({ "line": line, "op": name, "path": path })),
            (MultiResult::Deleted, false) => out.line(&format!("deleted {path}")),
            (_, false) => out.line(&format!("checked {path}")),
        }
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use zabkeeper_core::acl::Acl;
    use zabkeeper_core::tree::stat::CreateMode;

    #[test]
    fn lines_become_ops_in_order_skipping_blanks_and_comments() {
        let text =
            "# setup\n\ncreate /a 'two words'\n  create -e -s /b-\nset /a new -v 3\ndelete /a -v 1\ncheck /a -v 2\n";
        let ops = parse(text, "ops").expect("valid");
        let open = Acl::open_unsafe();
        assert_eq!(
            ops,
            vec![
                PlannedOp { line: 3, op: MultiOp::create("/a", b"two words", CreateMode::Persistent, &open) },
                PlannedOp { line: 4, op: MultiOp::create("/b-", b"", CreateMode::EphemeralSequential, &open) },
                PlannedOp { line: 5, op: MultiOp::set_data("/a", b"new", 3) },
                PlannedOp { line: 6, op: MultiOp::delete("/a", 1) },
                PlannedOp { line: 7, op: MultiOp::check("/a", 2) },
            ]
        );
    }

    #[test]
    fn a_bad_line_is_named_by_its_number() {
        let cases = [
            ("create /a\nfrobnicate /b\n", 2, "frobnicate"),
            ("create /a\n\nls /a\n", 3, "cannot be part of a multi"),
            ("set /a\n", 1, "required"),
            ("delete /a -v x\n", 1, "invalid value"),
            ("create '/a\n", 1, "unbalanced quotes"),
            ("create -c -e /a\n", 1, "cannot be combined"),
            ("create /a -\n", 1, "stdin"),
            ("create --acl world:anyone:xyz /a\n", 1, "xyz"),
        ];
        for (text, line, needle) in cases {
            match parse(text, "ops") {
                Err(OpsError::Line { line: got, message, .. }) => {
                    assert_eq!(got, line, "{text:?}: {message}");
                    assert!(message.contains(needle), "{text:?}: {message}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
        assert!(matches!(parse("# nothing\n\n", "ops"), Err(OpsError::Empty { .. })));
    }

    #[test]
    fn op_data_may_come_from_a_file_byte_for_byte() {
        let dir = tempfile::tempdir().expect("temp dir");
        let blob = dir.path().join("blob");
        std::fs::write(&blob, [0u8, 0xff]).expect("write");
        let text = format!("set /a --file '{}'\n", blob.display());
        assert_eq!(parse(&text, "ops").expect("valid")[0].op, MultiOp::set_data("/a", &[0, 0xff], -1));
        let missing = format!("create /a --file '{}'\n", dir.path().join("nope").display());
        assert!(
            matches!(parse(&missing, "ops"), Err(OpsError::Line { line: 1, message, .. }) if message.contains("nope"))
        );
    }
}
