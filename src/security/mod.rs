//! Who may speak to a member: [`tls`] on the client, admin and peer
//! listeners, with certificates re-read on SIGHUP, and who a client is by
//! its certificate ([`x509`]).

pub mod tls;
pub mod x509;
