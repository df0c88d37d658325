//! Four-letter words: admin commands sent as 4 ASCII bytes on the client port
//! instead of a length prefix, on a connection that has not sent a
//! ConnectRequest (`NIOServerCnxn.checkFourLetterWord`, `FourLetterCommands`).
//! The server answers in plain text and closes; the answers are the server's
//! business, this module only recognizes the words.

/// Every command ZooKeeper 3.9 recognizes on the client port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FourLetterWord {
    /// `conf`: configuration.
    Conf,
    /// `cons`: connections.
    Cons,
    /// `crst`: reset connection statistics.
    Crst,
    /// `dirs`: snapshot and log sizes.
    Dirs,
    /// `dump`: sessions and ephemerals.
    Dump,
    /// `envi`: environment.
    Envi,
    /// `gtmk`: get the trace mask.
    Gtmk,
    /// `hash`: digest history.
    Hash,
    /// `isro`: "ro" or "rw".
    Isro,
    /// `mntr`: monitoring variables.
    Mntr,
    /// `ruok`: "imok".
    Ruok,
    /// `srst`: reset server statistics.
    Srst,
    /// `srvr`: server details.
    Srvr,
    /// `stat`: server details and connections.
    Stat,
    /// `stmk`: set the trace mask; an 8-byte mask follows the word.
    Stmk,
    /// `wchc`: watches by session.
    Wchc,
    /// `wchp`: watches by path.
    Wchp,
    /// `wchs`: watch summary.
    Wchs,
    /// Telnet's interrupt sequence (0xfff4fffd): close quietly.
    TelnetClose,
}

/// Every word, for iteration.
pub const ALL: [FourLetterWord; 19] = [
    FourLetterWord::Conf,
    FourLetterWord::Cons,
    FourLetterWord::Crst,
    FourLetterWord::Dirs,
    FourLetterWord::Dump,
    FourLetterWord::Envi,
    FourLetterWord::Gtmk,
    FourLetterWord::Hash,
    FourLetterWord::Isro,
    FourLetterWord::Mntr,
    FourLetterWord::Ruok,
    FourLetterWord::Srst,
    FourLetterWord::Srvr,
    FourLetterWord::Stat,
    FourLetterWord::Stmk,
    FourLetterWord::Wchc,
    FourLetterWord::Wchp,
    FourLetterWord::Wchs,
    FourLetterWord::TelnetClose,
];

impl FourLetterWord {
    /// The four bytes on the wire.
    pub fn bytes(self) -> [u8; 4] {
        use FourLetterWord::*;
        match self {
            Conf => *b"conf",
            Cons => *b"cons",
            Crst => *b"crst",
            Dirs => *b"dirs",
            Dump => *b"dump",
            Envi => *b"envi",
            Gtmk => *b"gtmk",
            Hash => *b"hash",
            Isro => *b"isro",
            Mntr => *b"mntr",
            Ruok => *b"ruok",
            Srst => *b"srst",
            Srvr => *b"srvr",
            Stat => *b"stat",
            Stmk => *b"stmk",
            Wchc => *b"wchc",
            Wchp => *b"wchp",
            Wchs => *b"wchs",
            TelnetClose => [0xff, 0xf4, 0xff, 0xfd],
        }
    }

    /// ZooKeeper's name for the command.
    pub fn name(self) -> &'static str {
        use FourLetterWord::*;
        match self {
            Conf => "conf",
            Cons => "cons",
            Crst => "crst",
            Dirs => "dirs",
            Dump => "dump",
            Envi => "envi",
            Gtmk => "gtmk",
            Hash => "hash",
            Isro => "isro",
            Mntr => "mntr",
            Ruok => "ruok",
            Srst => "srst",
            Srvr => "srvr",
            Stat => "stat",
            Stmk => "stmk",
            Wchc => "wchc",
            Wchp => "wchp",
            Wchs => "wchs",
            TelnetClose => "telnet close",
        }
    }
}

/// The command the first four bytes of a fresh connection spell, if any.
pub fn four_letter_word(first4: [u8; 4]) -> Option<FourLetterWord> {
    ALL.into_iter().find(|w| w.bytes() == first4)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::frame::{check_frame, FrameStatus, DEFAULT_MAX_FRAME};

    #[test]
    fn recognizes_each_word_and_nothing_else() {
        assert_eq!(four_letter_word(*b"ruok"), Some(FourLetterWord::Ruok));
        assert_eq!(four_letter_word(*b"mntr"), Some(FourLetterWord::Mntr));
        assert_eq!(four_letter_word([0xff, 0xf4, 0xff, 0xfd]), Some(FourLetterWord::TelnetClose));
        assert_eq!(four_letter_word(*b"RUOK"), None);
        assert_eq!(four_letter_word([0, 0, 0, 44]), None);
        for w in ALL {
            assert_eq!(four_letter_word(w.bytes()), Some(w));
            if w != FourLetterWord::TelnetClose {
                assert_eq!(w.name().as_bytes(), w.bytes());
            }
        }
    }

    #[test]
    fn no_word_is_a_valid_frame_length() {
        for w in ALL {
            assert!(matches!(
                check_frame(&w.bytes(), DEFAULT_MAX_FRAME),
                FrameStatus::TooLarge(_) | FrameStatus::Negative(_)
            ));
        }
    }
}
