//! Access control: ZooKeeper's ACL entries, identities and the schemes world,
//! auth, digest and ip, with the same checks and expansions as ZooKeeper
//! (`PrepRequestProcessor.fixupACL`, `ZooKeeperServer.checkACL`).

use base64::Engine;
use serde::{Deserialize, Serialize};
use sha1::{Digest, Sha1};
use std::net::IpAddr;
use std::sync::Arc;

/// Permission bits.
pub mod perms {
    /// Read data and list children.
    pub const READ: i32 = 1;
    /// Set data.
    pub const WRITE: i32 = 2;
    /// Create children.
    pub const CREATE: i32 = 4;
    /// Delete children.
    pub const DELETE: i32 = 8;
    /// Set the ACL.
    pub const ADMIN: i32 = 16;
    /// Everything.
    pub const ALL: i32 = READ | WRITE | CREATE | DELETE | ADMIN;
}

/// An identity: a scheme and an id within it (`digest`, `user:hash`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Id {
    /// world, auth, digest, ip, or super for the superuser.
    pub scheme: String,
    /// The scheme-specific id.
    pub id: String,
}

impl Id {
    /// Builds an identity.
    pub fn new(scheme: impl Into<String>, id: impl Into<String>) -> Id {
        Id { scheme: scheme.into(), id: id.into() }
    }
}

/// One ACL entry.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Acl {
    /// A bit set of [`perms`].
    pub perms: i32,
    /// Who the entry applies to.
    pub id: Id,
}

impl Acl {
    /// Builds an entry.
    pub fn new(perms: i32, scheme: &str, id: &str) -> Acl {
        Acl { perms, id: Id::new(scheme, id) }
    }

    /// `world:anyone` with every permission (ZooKeeper's OPEN_ACL_UNSAFE).
    pub fn open_unsafe() -> Vec<Acl> {
        vec![Acl::new(perms::ALL, "world", "anyone")]
    }

    /// `world:anyone` read-only (ZooKeeper's READ_ACL_UNSAFE).
    pub fn read_unsafe() -> Vec<Acl> {
        vec![Acl::new(perms::READ, "world", "anyone")]
    }

    /// Every permission for the creator's authenticated ids (CREATOR_ALL_ACL).
    pub fn creator_all() -> Vec<Acl> {
        vec![Acl::new(perms::ALL, "auth", "")]
    }
}

/// An ACL list shared by every node that has it (ZooKeeper's ACL cache).
pub type AclList = Arc<[Acl]>;

/// Why an `auth` request failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AuthError {
    /// No provider for the scheme.
    #[error("no authentication provider for scheme {0:?}")]
    UnknownScheme(String),
    /// The credentials are malformed.
    #[error("malformed credentials for scheme {scheme:?}: {reason}")]
    Malformed {
        /// The scheme.
        scheme: String,
        /// What is wrong.
        reason: String,
    },
    /// `x509` asked on a connection that showed no certificate the TLS
    /// handshake verified (or one without a subject).
    #[error("no verified client certificate on this connection for scheme \"x509\"")]
    NoCertificate,
}

/// The identity a digest credential `user:password` authenticates as:
/// `user:base64(sha1("user:password"))`, as ZooKeeper's DigestAuthenticationProvider.
pub fn digest_id(credential: &str) -> Result<String, AuthError> {
    let Some((user, _password)) = credential.split_once(':') else {
        return Err(AuthError::Malformed { scheme: "digest".into(), reason: "expected user:password".into() });
    };
    let hash = Sha1::digest(credential.as_bytes());
    Ok(format!("{user}:{}", base64::engine::general_purpose::STANDARD.encode(hash)))
}

/// Turns an `auth` packet into the identity it adds to the session.
///
/// A digest credential is taken as ZooKeeper's `DigestAuthenticationProvider`
/// takes it: whatever the bytes (decoded as UTF-8, invalid sequences
/// replaced, as Java's `new String(bytes)` does), the user is the part before
/// the first ':' (all of it when there is none) and the hash covers the whole
/// text, so authentication itself never fails for the digest scheme.
pub fn authenticate(scheme: &str, auth: &[u8]) -> Result<Id, AuthError> {
    match scheme {
        "digest" => {
            let credential = String::from_utf8_lossy(auth);
            let user = credential.split(':').next().unwrap_or_default();
            let hash = Sha1::digest(credential.as_bytes());
            Ok(Id::new("digest", format!("{user}:{}", base64::engine::general_purpose::STANDARD.encode(hash))))
        }
        other => Err(AuthError::UnknownScheme(other.to_string())),
    }
}

/// [`authenticate`] on a connection that holds `identities`: `x509` is the
/// identity the connection's verified certificate gave it, which it has from
/// its TLS handshake or not at all (ZooKeeper's X509AuthenticationProvider
/// reads the certificate again; the credentials sent are ignored).
pub fn authenticate_on(scheme: &str, auth: &[u8], identities: &[Id]) -> Result<Id, AuthError> {
    if scheme == "x509" {
        return identities.iter().find(|i| i.scheme == "x509").cloned().ok_or(AuthError::NoCertificate);
    }
    authenticate(scheme, auth)
}

/// Whether identities of this scheme come from a real authentication (and so
/// may stand in for the `auth` scheme). The ip scheme is implicit, not authenticated.
fn is_authenticated_scheme(scheme: &str) -> bool {
    matches!(scheme, "digest" | "super" | "x509")
}

/// Whether an ACL id is well formed for its scheme (ZooKeeper's `isValid`).
fn is_valid_id(scheme: &str, id: &str) -> bool {
    match scheme {
        "digest" => id.split(':').count() == 2,
        "ip" => parse_ip_pattern(id).is_some(),
        // As ZooKeeper's X509AuthenticationProvider: any subject is an id.
        "x509" => true,
        _ => false,
    }
}

/// Validates and expands an ACL list for create/setACL (ZooKeeper's
/// `fixupACL`): duplicates are dropped, `auth` expands to the caller's
/// authenticated identities. `None` means InvalidACL.
pub fn fixup(acl: &[Acl], identities: &[Id]) -> Option<Vec<Acl>> {
    let mut unique: Vec<&Acl> = Vec::with_capacity(acl.len());
    for entry in acl {
        if !unique.contains(&entry) {
            unique.push(entry);
        }
    }
    if unique.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(unique.len());
    for entry in unique {
        let Id { scheme, id } = &entry.id;
        if scheme == "world" && id == "anyone" {
            out.push(entry.clone());
        } else if scheme == "auth" {
            let mut any = false;
            for identity in identities.iter().filter(|i| is_authenticated_scheme(&i.scheme)) {
                any = true;
                out.push(Acl { perms: entry.perms, id: identity.clone() });
            }
            if !any {
                return None;
            }
        } else if is_valid_id(scheme, id) {
            out.push(entry.clone());
        } else {
            return None;
        }
    }
    Some(out)
}

/// Whether `identities` grant `perm` under `acl` (ZooKeeper's `checkACL`).
pub fn permits(acl: &[Acl], perm: i32, identities: &[Id]) -> bool {
    if identities.iter().any(|i| i.scheme == "super") {
        return true;
    }
    if acl.is_empty() {
        return true;
    }
    for entry in acl.iter().filter(|e| e.perms & perm != 0) {
        if entry.id.scheme == "world" && entry.id.id == "anyone" {
            return true;
        }
        for identity in identities.iter().filter(|i| i.scheme == entry.id.scheme) {
            let matched = match entry.id.scheme.as_str() {
                "ip" => ip_matches(&entry.id.id, &identity.id),
                _ => identity.id == entry.id.id,
            };
            if matched {
                return true;
            }
        }
    }
    false
}

/// The ACL as getACL shows it to a caller without ADMIN: digest hashes masked.
pub fn redacted(acl: &[Acl]) -> Vec<Acl> {
    acl.iter()
        .map(|entry| {
            if entry.id.scheme == "digest" {
                let user = entry.id.id.split(':').next().unwrap_or("");
                Acl { perms: entry.perms, id: Id::new("digest", format!("{user}:x")) }
            } else {
                entry.clone()
            }
        })
        .collect()
}

/// Parses `addr` or `addr/bits`.
fn parse_ip_pattern(pattern: &str) -> Option<(IpAddr, u32)> {
    let (addr, bits) = match pattern.split_once('/') {
        Some((addr, bits)) => (addr, Some(bits.parse::<u32>().ok()?)),
        None => (pattern, None),
    };
    let addr: IpAddr = addr.parse().ok()?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let bits = bits.unwrap_or(max);
    (bits <= max).then_some((addr, bits))
}

/// Whether client address `client` lies in the ip ACL `pattern`.
fn ip_matches(pattern: &str, client: &str) -> bool {
    let (Some((net, bits)), Ok(addr)) = (parse_ip_pattern(pattern), client.parse::<IpAddr>()) else {
        return false;
    };
    match (net, addr) {
        (IpAddr::V4(n), IpAddr::V4(a)) => prefix_eq(&n.octets(), &a.octets(), bits),
        (IpAddr::V6(n), IpAddr::V6(a)) => prefix_eq(&n.octets(), &a.octets(), bits),
        _ => false,
    }
}

fn prefix_eq(a: &[u8], b: &[u8], bits: u32) -> bool {
    let full = (bits / 8) as usize;
    if a[..full] != b[..full] {
        return false;
    }
    let rest = bits % 8;
    if rest == 0 {
        return true;
    }
    let mask = 0xffu8 << (8 - rest);
    a[full] & mask == b[full] & mask
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_matches_zookeeper_generate_digest() {
        // DigestAuthenticationProvider.generateDigest("super:test")
        assert_eq!(digest_id("super:test").unwrap(), "super:D/InIHSb7yEEbrWz8b9l71RjZJU=");
        assert!(digest_id("nocolon").is_err());
    }

    #[test]
    fn world_anyone_permits_everyone() {
        assert!(permits(&Acl::open_unsafe(), perms::WRITE, &[]));
        assert!(!permits(&Acl::read_unsafe(), perms::WRITE, &[]));
    }

    #[test]
    fn digest_acl_needs_the_matching_identity() {
        let id = digest_id("alice:secret").unwrap();
        let acl = vec![Acl::new(perms::ALL, "digest", &id)];
        assert!(!permits(&acl, perms::READ, &[]));
        assert!(!permits(&acl, perms::READ, &[Id::new("digest", digest_id("bob:secret").unwrap())]));
        assert!(permits(&acl, perms::READ, &[Id::new("digest", id)]));
    }

    #[test]
    fn ip_acl_matches_networks() {
        let acl = vec![Acl::new(perms::READ, "ip", "127.0.0.0/8")];
        assert!(permits(&acl, perms::READ, &[Id::new("ip", "127.0.0.1")]));
        assert!(!permits(&acl, perms::READ, &[Id::new("ip", "10.0.0.1")]));
        assert!(permits(&[Acl::new(perms::READ, "ip", "10.1.2.3")], perms::READ, &[Id::new("ip", "10.1.2.3")]));
        assert!(ip_matches("192.168.1.0/23", "192.168.0.77"));
        assert!(!ip_matches("192.168.1.0/24", "192.168.0.77"));
    }

    #[test]
    fn fixup_expands_auth_and_rejects_bad_entries() {
        let alice = Id::new("digest", digest_id("alice:pw").unwrap());
        let ip = Id::new("ip", "127.0.0.1");
        let expanded = fixup(&Acl::creator_all(), &[ip.clone(), alice.clone()]).unwrap();
        assert_eq!(expanded, vec![Acl { perms: perms::ALL, id: alice }]);
        assert_eq!(fixup(&Acl::creator_all(), &[ip]), None, "auth without an authenticated id");
        assert_eq!(fixup(&[], &[]), None, "empty list");
        assert_eq!(fixup(&[Acl::new(1, "world", "someone")], &[]), None);
        assert_eq!(fixup(&[Acl::new(1, "nosuch", "x")], &[]), None);
        assert_eq!(fixup(&[Acl::new(1, "ip", "300.1.1.1")], &[]), None);
        assert_eq!(fixup(&[Acl::new(1, "digest", "nocolon")], &[]), None);
        let twice = [Acl::new(31, "world", "anyone"), Acl::new(31, "world", "anyone")];
        assert_eq!(fixup(&twice, &[]).unwrap().len(), 1);
    }

    #[test]
    fn redaction_masks_digest_hashes() {
        let acl = vec![Acl::new(31, "digest", "alice:abc="), Acl::new(1, "world", "anyone")];
        assert_eq!(redacted(&acl), vec![Acl::new(31, "digest", "alice:x"), Acl::new(1, "world", "anyone")]);
    }

    #[test]
    fn x509_is_the_connections_certificate_or_nothing() {
        let certified = [Id::new("ip", "127.0.0.1"), Id::new("x509", "CN=app,O=Example")];
        assert_eq!(authenticate_on("x509", b"ignored", &certified), Ok(certified[1].clone()));
        assert_eq!(authenticate_on("x509", b"CN=app,O=Example", &certified[..1]), Err(AuthError::NoCertificate));
        assert!(authenticate_on("digest", b"a:b", &certified).is_ok(), "other schemes as before");
        let acl = [Acl::new(perms::ALL, "x509", "CN=app,O=Example")];
        assert_eq!(fixup(&acl, &[]), Some(acl.to_vec()), "any subject is a valid x509 id");
        assert!(permits(&acl, perms::READ, &certified));
        assert!(!permits(&acl, perms::READ, &[Id::new("x509", "CN=other,O=Example")]));
        let expanded = fixup(&Acl::creator_all(), &certified).expect("auth expands to the certificate");
        assert_eq!(expanded, vec![Acl { perms: perms::ALL, id: certified[1].clone() }]);
    }

    #[test]
    fn unknown_auth_scheme_is_refused() {
        assert_eq!(authenticate("kerberos", b"x"), Err(AuthError::UnknownScheme("kerberos".into())));
        assert!(authenticate("digest", b"a:b").is_ok());
    }

    #[test]
    fn digest_auth_accepts_any_credential_as_zookeeper() {
        // The identity of "user:password" is the one digest ACLs name.
        assert_eq!(authenticate("digest", b"alice:secret").unwrap().id, digest_id("alice:secret").unwrap());
        // No colon: ZooKeeper takes the whole text as the user and succeeds.
        let id = authenticate("digest", b"nocolon").unwrap();
        assert_eq!(id.scheme, "digest");
        assert_eq!(
            id.id,
            format!("nocolon:{}", base64::engine::general_purpose::STANDARD.encode(Sha1::digest(b"nocolon")))
        );
        // Bytes that are not UTF-8 are not an error either.
        assert!(authenticate("digest", &[0xff, b':', b'x']).is_ok());
    }
}
