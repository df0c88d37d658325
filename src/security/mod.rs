//! Who may speak to a member: [`tls`] on the client, admin and peer
//! listeners, with certificates re-read on SIGHUP.

pub mod tls;
