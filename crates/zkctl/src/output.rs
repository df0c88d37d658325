//! How zkctl shows results: zkCli-like text for people, one JSON document
//! per result (one per line) for scripts, and errors naming their code.

use serde_json::{json, Value};
use std::io::Write;
use zabkeeper_client::acl_spec::{format_acl, format_perms};
use zabkeeper_client::{ClientError, ConnectionState, WatchedEvent};
use zabkeeper_core::acl::Acl;
use zabkeeper_core::tree::stat::Stat;
use zabkeeper_core::tree::watch::WatchEvent;

/// Process exit codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Success.
    Ok,
    /// The server answered with an error code.
    Server,
    /// The command line or an argument is wrong.
    Usage,
    /// No session, or the session broke (connection loss, expiry, timeout).
    Connection,
    /// Interrupted (Ctrl-C) before the awaited event.
    Interrupted,
    /// The exit code of the command `zkctl lock ... -- COMMAND` ran.
    Command(u8),
}

impl Exit {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Server => 1,
            Exit::Usage => 2,
            Exit::Connection => 3,
            Exit::Interrupted => 130,
            Exit::Command(code) => code,
        }
    }
}

/// The exit code an error maps to.
pub fn exit_for(e: &ClientError) -> Exit {
    match e {
        ClientError::Server(_) | ClientError::MultiFailed { .. } => Exit::Server,
        ClientError::InvalidArgument(_) | ClientError::InvalidConnectString { .. } => Exit::Usage,
        _ => Exit::Connection,
    }
}

/// A time in ms since the epoch as Java's `Date.toString()` in UTC, as zkCli prints it.
pub fn format_time(ms: i64) -> String {
    const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    let secs = ms.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rest = secs.rem_euclid(86_400);
    let (year, month, day) = zabkeeper_datadir::backup::time::civil_from_days(days);
    let weekday = WEEKDAYS[days.rem_euclid(7) as usize];
    let month_name = MONTHS[(month - 1) as usize];
    format!("{weekday} {month_name} {day:02} {:02}:{:02}:{:02} UTC {year}", rest / 3600, rest % 3600 / 60, rest % 60)
}

/// A Stat as zkCli's `stat` prints it.
pub fn stat_text(s: &Stat) -> String {
    format!(
        "cZxid = {:#x}\nctime = {}\nmZxid = {:#x}\nmtime = {}\npZxid = {:#x}\ncversion = {}\ndataVersion = {}\naclVersion = {}\nephemeralOwner = {:#x}\ndataLength = {}\nnumChildren = {}",
        s.czxid,
        format_time(s.ctime),
        s.mzxid,
        format_time(s.mtime),
        s.pzxid,
        s.cversion,
        s.version,
        s.aversion,
        s.ephemeral_owner,
        s.data_length,
        s.num_children
    )
}

/// A Stat as JSON, with ZooKeeper's field names.
pub fn stat_json(s: &Stat) -> Value {
    json!({
        "czxid": s.czxid,
        "mzxid": s.mzxid,
        "ctime": s.ctime,
        "mtime": s.mtime,
        "version": s.version,
        "cversion": s.cversion,
        "aversion": s.aversion,
        "ephemeralOwner": s.ephemeral_owner,
        "dataLength": s.data_length,
        "numChildren": s.num_children,
        "pzxid": s.pzxid,
    })
}

/// How node data is shown: as it is, or encoded so any bytes survive a
/// terminal, a pipe or a JSON string.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Encoding {
    /// The bytes as they are (JSON: the text when it is UTF-8).
    #[default]
    Raw,
    /// Lowercase hexadecimal, two digits a byte.
    Hex,
    /// Standard base64 with padding.
    Base64,
}

impl Encoding {
    /// The encoding `--hex` / `--base64` ask for (clap keeps them exclusive).
    pub fn from_flags(hex: bool, base64: bool) -> Encoding {
        match (hex, base64) {
            (true, _) => Encoding::Hex,
            (false, true) => Encoding::Base64,
            (false, false) => Encoding::Raw,
        }
    }

    /// The encoded text, or `None` for `Raw` (which is bytes, not text).
    pub fn encode(self, data: &[u8]) -> Option<String> {
        use base64::Engine;
        match self {
            Encoding::Raw => None,
            Encoding::Hex => Some(hex(data)),
            Encoding::Base64 => Some(base64::engine::general_purpose::STANDARD.encode(data)),
        }
    }

    /// The name JSON output gives it.
    pub fn name(self) -> &'static str {
        match self {
            Encoding::Raw => "raw",
            Encoding::Hex => "hex",
            Encoding::Base64 => "base64",
        }
    }
}

/// Lowercase hex, two digits a byte (a dependency would be more than this).
pub fn hex(data: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(data.len() * 2);
    for byte in data {
        text.push(char::from(DIGITS[usize::from(byte >> 4)]));
        text.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    text
}

/// Data as JSON: the text when it is UTF-8, and always base64; with an
/// encoding asked for, `data` holds the encoded text and `encoding` names it.
pub fn data_json(data: &[u8], encoding: Encoding) -> Value {
    use base64::Engine;
    let mut doc = json!({
        "data": std::str::from_utf8(data).ok(),
        "data_base64": base64::engine::general_purpose::STANDARD.encode(data),
    });
    if let Some(encoded) = encoding.encode(data) {
        doc["data"] = Value::String(encoded);
        doc["encoding"] = Value::String(encoding.name().to_string());
    }
    doc
}

/// An ACL entry as JSON.
pub fn acl_json(acl: &Acl) -> Value {
    json!({ "scheme": acl.id.scheme, "id": acl.id.id, "perms": format_perms(acl.perms), "perms_bits": acl.perms })
}

/// A watch event as JSON.
pub fn event_json(e: &WatchEvent) -> Value {
    json!({ "event": { "type": format!("{:?}", e.event_type), "path": e.path, "zxid": e.zxid } })
}

/// A watch event as zkCli prints it.
pub fn event_text(e: &WatchEvent) -> String {
    format!("WatchedEvent state:SyncConnected type:{:?} path:{} zxid:{:#x}", e.event_type, e.path, e.zxid)
}

/// A watched event as one line: zkCli's text, or a JSON document.
pub fn watched_line(event: &WatchedEvent, json: bool) -> String {
    match (event, json) {
        (WatchedEvent::Node(e), true) => event_json(e).to_string(),
        (WatchedEvent::Node(e), false) => event_text(e),
        (WatchedEvent::State(s), true) => json!({ "state": s.name() }).to_string(),
        (WatchedEvent::State(s), false) => format!("WatchedEvent state:{} type:None path:null", s.name()),
        (WatchedEvent::Overflowed, true) => json!({ "overflowed": true }).to_string(),
        (WatchedEvent::Overflowed, false) => "WatchedEvent overflowed: events were lost, watch removed".to_string(),
    }
}

/// Writes results in the chosen form.
pub struct Printer {
    /// JSON lines instead of text.
    pub json: bool,
    /// In the shell: where one-shot watch events go when they fire after
    /// their command ended; `None` makes a watching command wait for its event.
    pub events: Option<crate::events::LateEvents>,
}

impl Printer {
    /// Prints one JSON document on its own line.
    pub fn doc(&self, value: Value) {
        self.line(&value.to_string());
    }

    /// Prints a line of text.
    pub fn line(&self, text: &str) {
        self.raw(text.as_bytes());
    }

    /// Writes raw bytes and a newline (node data in text mode).
    pub fn raw(&self, data: &[u8]) {
        let mut out = std::io::stdout().lock();
        // A closed pipe (e.g. `| head`) is not worth an error of its own.
        let _ = out.write_all(data).and_then(|()| out.write_all(b"\n")).and_then(|()| out.flush());
    }

    /// Prints a Stat.
    pub fn stat(&self, stat: &Stat) {
        if self.json {
            self.doc(json!({ "stat": stat_json(stat) }));
        } else {
            self.line(&stat_text(stat));
        }
    }

    /// Prints a watched event (node event or state notice).
    pub fn watched(&self, event: &WatchedEvent) {
        self.line(&watched_line(event, self.json));
    }

    /// Prints node data in the chosen encoding (raw bytes in text mode without one).
    pub fn data(&self, data: &[u8], encoding: Encoding) {
        match encoding.encode(data) {
            Some(text) => self.line(&text),
            None => self.raw(data),
        }
    }

    /// Prints ACL entries.
    pub fn acl(&self, acl: &[Acl], stat: &Stat) {
        if self.json {
            self.doc(json!({ "acl": acl.iter().map(acl_json).collect::<Vec<_>>(), "stat": stat_json(stat) }));
        } else {
            for entry in acl {
                self.line(&format_acl(entry));
            }
        }
    }

    /// Reports an error on stderr and returns its exit code.
    pub fn fail(&self, e: &ClientError) -> Exit {
        self.fail_in(e, "", Value::Null)
    }

    /// Reports an error and where it happened: text `Error: PLACE: error`,
    /// JSON with `fields` (an object) added to the `error` document.
    pub fn fail_in(&self, e: &ClientError, place: &str, fields: Value) -> Exit {
        let exit = exit_for(e);
        if self.json {
            let (code, name, path) = match e {
                ClientError::Server(z) | ClientError::MultiFailed { error: z, .. } => {
                    (Some(z.code.code()), Some(z.code.name()), Some(z.path.clone()))
                }
                other => (other.code().map(|c| c.code()), other.code().map(|c| c.name()), None),
            };
            let message = if place.is_empty() { e.to_string() } else { format!("{place}: {e}") };
            let mut error = json!({ "code": code, "name": name, "path": path, "message": message });
            if let (Value::Object(extra), Value::Object(into)) = (fields, &mut error) {
                into.extend(extra);
            }
            eprintln!("{}", json!({ "error": error }));
        } else if place.is_empty() {
            eprintln!("Error: {e}");
        } else {
            eprintln!("Error: {place}: {e}");
        }
        exit
    }

    /// Reports a usage problem found after parsing.
    pub fn usage(&self, message: &str) -> Exit {
        self.fail(&ClientError::InvalidArgument(message.to_string()))
    }

    /// Reports that a watch ended because the session did.
    pub fn session_over(&self, state: ConnectionState) -> Exit {
        let e = match state {
            ConnectionState::Expired => ClientError::SessionExpired,
            _ => ClientError::Closed,
        };
        self.fail(&e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zabkeeper_core::error::{ErrorCode, ZkError};

    #[test]
    fn times_print_like_java_dates_in_utc() {
        assert_eq!(format_time(0), "Thu Jan 01 00:00:00 UTC 1970");
        assert_eq!(format_time(951_782_400_000), "Tue Feb 29 00:00:00 UTC 2000");
        assert_eq!(format_time(1_700_000_000_123), "Tue Nov 14 22:13:20 UTC 2023");
        assert_eq!(format_time(-1000), "Wed Dec 31 23:59:59 UTC 1969");
    }

    #[test]
    fn stat_prints_every_field_like_zkcli() {
        let s = Stat { czxid: 0x10, mzxid: 0x11, pzxid: 0x12, version: 2, ephemeral_owner: 0xabc, ..Stat::default() };
        let text = stat_text(&s);
        assert!(text.starts_with("cZxid = 0x10\nctime = Thu Jan 01 00:00:00 UTC 1970\nmZxid = 0x11\n"), "{text}");
        assert!(text.contains("dataVersion = 2\n"));
        assert!(text.contains("ephemeralOwner = 0xabc\n"));
        assert!(text.ends_with("numChildren = 0"));
        assert_eq!(stat_json(&s)["ephemeralOwner"], 0xabc);
    }

    #[test]
    fn errors_map_to_exit_codes_by_kind() {
        assert_eq!(exit_for(&ClientError::Server(ZkError::new(ErrorCode::NoNode, "/x"))), Exit::Server);
        assert_eq!(exit_for(&ClientError::InvalidArgument("x".into())), Exit::Usage);
        assert_eq!(exit_for(&ClientError::ConnectionLoss("x".into())), Exit::Connection);
        assert_eq!(exit_for(&ClientError::SessionExpired), Exit::Connection);
    }

    #[test]
    fn data_is_shown_as_text_when_it_is_utf8_and_always_as_base64() {
        assert_eq!(data_json(b"hi", Encoding::Raw), json!({ "data": "hi", "data_base64": "aGk=" }));
        assert_eq!(data_json(&[0xff], Encoding::Raw), json!({ "data": null, "data_base64": "/w==" }));
    }

    #[test]
    fn an_encoding_puts_the_encoded_bytes_in_data_and_names_itself() {
        let bytes = [0u8, 0xff, b'a', 0x10];
        assert_eq!(hex(&bytes), "00ff6110");
        assert_eq!(Encoding::Hex.encode(&bytes).as_deref(), Some("00ff6110"));
        assert_eq!(Encoding::Base64.encode(&bytes).as_deref(), Some("AP9hEA=="));
        assert_eq!(Encoding::Raw.encode(&bytes), None);
        assert_eq!(Encoding::from_flags(false, true), Encoding::Base64);
        assert_eq!(
            data_json(&bytes, Encoding::Hex),
            json!({ "data": "00ff6110", "encoding": "hex", "data_base64": "AP9hEA==" })
        );
        assert_eq!(data_json(b"", Encoding::Base64)["data"], "");
    }
}
