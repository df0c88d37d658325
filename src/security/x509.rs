//! x509 identities, as ZooKeeper's `X509AuthenticationProvider` gives them:
//! a client whose TLS certificate the handshake verified (`[tls]
//! client_auth`) is `x509:<its subject>`, the subject written as Java's
//! `X500Principal.getName()` writes it (RFC 2253: the most specific name
//! first, `CN=app,OU=ops,O=Example,C=US`), so the ACLs a ZooKeeper
//! deployment wrote (`x509:CN=...`) name the same clients here. The subject
//! named by `x509_superuser` is a superuser too.

use rustls_pki_types::CertificateDer;
use x509_parser::asn1_rs::{Any, Tag, ToDer};
use x509_parser::prelude::{FromDer, X509Certificate};
use x509_parser::x509::AttributeTypeAndValue;
use zabkeeper_core::acl::Id;

/// Why a certificate gives no x509 identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoIdentity {
    /// The bytes are no X.509 certificate.
    #[error("the client certificate cannot be read: {0}")]
    Unreadable(String),
    /// The subject is empty (a certificate that names only alternative names).
    #[error("the client certificate has an empty subject")]
    EmptySubject,
}

/// The identities a verified certificate chain (leaf first) gives a
/// connection: its `x509` subject, and `super` when that subject is
/// `superuser`. None without a certificate; a certificate that gives no
/// identity is logged and the connection goes on with the others it has.
pub fn identities(chain: Option<&[CertificateDer<'_>]>, superuser: Option<&str>) -> Vec<Id> {
    let Some(leaf) = chain.and_then(<[_]>::first) else { return Vec::new() };
    match subject(leaf) {
        Ok(name) => {
            let is_super = superuser == Some(name.as_str());
            let mut ids = vec![Id::new("x509", name)];
            if is_super {
                ids.push(Id::new("super", ""));
            }
            ids
        }
        Err(why) => {
            tracing::info!(%why, "no x509 identity for this connection");
            Vec::new()
        }
    }
}

/// The certificate's subject in RFC 2253 form, as Java writes it.
pub fn subject(leaf: &CertificateDer<'_>) -> Result<String, NoIdentity> {
    let (_, cert) = X509Certificate::from_der(leaf.as_ref()).map_err(|e| NoIdentity::Unreadable(e.to_string()))?;
    let rdns: Vec<String> =
        cert.subject().iter_rdn().map(|rdn| rdn.iter().map(attribute).collect::<Vec<_>>().join("+")).collect();
    if rdns.is_empty() {
        return Err(NoIdentity::EmptySubject);
    }
    // DER holds the least specific name first; RFC 2253 writes it last.
    Ok(rdns.into_iter().rev().collect::<Vec<_>>().join(","))
}

/// One `type=value`: RFC 2253's keywords where it has one and the value is
/// a string, else the dotted type and the value's DER in hex (`#...`).
fn attribute(ava: &AttributeTypeAndValue<'_>) -> String {
    let oid = ava.attr_type().to_id_string();
    let value = ava.attr_value();
    match (keyword(&oid), text(value)) {
        (Some(keyword), Some(text)) => format!("{keyword}={}", escape(&text)),
        _ => format!("{oid}=#{}", hex(value)),
    }
}

/// RFC 2253's keywords, the only ones Java's RFC 2253 form uses.
fn keyword(oid: &str) -> Option<&'static str> {
    Some(match oid {
        "2.5.4.3" => "CN",
        "2.5.4.6" => "C",
        "2.5.4.7" => "L",
        "2.5.4.8" => "ST",
        "2.5.4.9" => "STREET",
        "2.5.4.10" => "O",
        "2.5.4.11" => "OU",
        "0.9.2342.19200300.100.1.1" => "UID",
        "0.9.2342.19200300.100.1.25" => "DC",
        _ => return None,
    })
}

/// The value as text, when it is one of the string types a name holds.
fn text(value: &Any<'_>) -> Option<String> {
    match value.tag() {
        Tag::Utf8String | Tag::PrintableString | Tag::Ia5String | Tag::NumericString | Tag::VisibleString => {
            std::str::from_utf8(value.data).ok().map(str::to_string)
        }
        // Latin-1, as Java reads a TeletexString.
        Tag::TeletexString => Some(value.data.iter().map(|&b| char::from(b)).collect()),
        Tag::BmpString => {
            let units: Vec<u16> = value.data.chunks_exact(2).map(|c| u16::from_be_bytes([c[0], c[1]])).collect();
            String::from_utf16(&units).ok()
        }
        _ => None,
    }
}

/// RFC 2253's escapes: its special characters, and a leading `#` or space
/// and a trailing space.
fn escape(text: &str) -> String {
    let last = text.chars().count().saturating_sub(1);
    let mut out = String::with_capacity(text.len());
    for (i, c) in text.chars().enumerate() {
        let special = matches!(c, ',' | '+' | '"' | '\\' | '<' | '>' | ';')
            || (i == 0 && matches!(c, '#' | ' '))
            || (i == last && c == ' ');
        if special {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The value's whole DER (tag, length, content) in lower-case hex.
fn hex(value: &Any<'_>) -> String {
    let der = value.to_der_vec().unwrap_or_else(|_| value.data.to_vec());
    der.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn certificate(name: rcgen::DistinguishedName) -> CertificateDer<'static> {
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(vec!["client.example".to_string()]).expect("params");
        params.distinguished_name = name;
        params.self_signed(&key).expect("certificate").der().clone()
    }

    fn named(parts: &[(rcgen::DnType, &str)]) -> CertificateDer<'static> {
        let mut name = rcgen::DistinguishedName::new();
        for (kind, value) in parts {
            name.push(kind.clone(), *value);
        }
        certificate(name)
    }

    #[test]
    fn the_subject_reads_most_specific_first_as_java_writes_it() {
        use rcgen::DnType::*;
        let cert = named(&[(CountryName, "US"), (OrganizationName, "Example"), (CommonName, "app")]);
        assert_eq!(subject(&cert), Ok("CN=app,O=Example,C=US".to_string()));
    }

    #[test]
    fn special_characters_are_escaped_as_rfc_2253_says() {
        use rcgen::DnType::*;
        let cert = named(&[(OrganizationName, "Acme, Inc."), (CommonName, "#a+b ")]);
        assert_eq!(subject(&cert), Ok(r"CN=\#a\+b\ ,O=Acme\, Inc.".to_string()));
    }

    #[test]
    fn a_type_without_a_keyword_is_its_oid_and_the_values_der() {
        let email = rcgen::DnType::CustomDnType(vec![1, 2, 840, 113549, 1, 9, 1]);
        let mut name = rcgen::DistinguishedName::new();
        name.push(email, rcgen::DnValue::Ia5String("a@b".try_into().expect("ia5")));
        name.push(rcgen::DnType::CommonName, "app");
        // IA5String (0x16), three bytes: "a@b".
        assert_eq!(subject(&certificate(name)), Ok("CN=app,1.2.840.113549.1.9.1=#1603614062".to_string()));
    }

    #[test]
    fn a_certificate_without_a_subject_gives_no_identity() {
        let cert = certificate(rcgen::DistinguishedName::new());
        assert_eq!(subject(&cert), Err(NoIdentity::EmptySubject));
        assert_eq!(identities(Some(&[cert]), None), Vec::<Id>::new());
        assert!(matches!(subject(&CertificateDer::from(vec![1, 2, 3])), Err(NoIdentity::Unreadable(_))));
    }

    #[test]
    fn the_superuser_subject_is_also_super() {
        let cert = named(&[(rcgen::DnType::CommonName, "admin")]);
        assert_eq!(
            identities(Some(std::slice::from_ref(&cert)), Some("CN=admin")),
            vec![Id::new("x509", "CN=admin"), Id::new("super", "")]
        );
        assert_eq!(identities(Some(&[cert]), Some("CN=other")), vec![Id::new("x509", "CN=admin")]);
        assert_eq!(identities(None, Some("CN=admin")), Vec::<Id>::new());
    }
}
