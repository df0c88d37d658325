//! Turns the server's `Response` into typed results: an error code becomes a
//! [`ClientError::Server`], and a result of an unexpected shape a protocol
//! error (server input never panics the client).

use super::convert::{acl_from_pb, stat_from_pb};
use super::error::ClientError;
use crate::acl::{Acl, Id};
use crate::proto::client as pb;
use crate::tree::stat::Stat;
use pb::response::Result as R;
use zabkeeper_core::error::{ErrorCode, ZkError};

/// The error a response carries (its code must be non-zero).
pub(crate) fn server_error(r: &pb::Response) -> ClientError {
    match ErrorCode::from_code(r.error) {
        Some(code) => {
            ClientError::Server(ZkError { code, path: r.error_path.clone(), reason: r.error_message.clone() })
        }
        None => ClientError::Protocol(format!("unknown error code {}", r.error)),
    }
}

/// The result of a response, or its error; `path` names the request's node
/// when the server's error does not.
pub(crate) fn result(r: pb::Response, path: &str) -> Result<Option<R>, ClientError> {
    if r.error != 0 {
        return Err(match server_error(&r) {
            ClientError::Server(mut e) => {
                if e.path.is_empty() {
                    e.path = path.to_string();
                }
                ClientError::Server(e)
            }
            other => other,
        });
    }
    Ok(r.result)
}

fn unexpected(expected: &str, got: &Option<R>) -> ClientError {
    let got = match got {
        None => "no result".to_string(),
        Some(r) => format!("{r:?}"),
    };
    ClientError::Protocol(format!("expected a {expected} result, got {got}"))
}

fn stat_of(s: Option<pb::Stat>) -> Stat {
    s.as_ref().map(stat_from_pb).unwrap_or_default()
}

/// A `StatResponse`.
pub(crate) fn stat(r: Option<R>) -> Result<Stat, ClientError> {
    match r {
        Some(R::Stat(s)) => Ok(stat_of(s.stat)),
        other => Err(unexpected("stat", &other)),
    }
}

/// A `CreateResponse`: the created path and Stat.
pub(crate) fn created(r: Option<R>) -> Result<(String, Stat), ClientError> {
    match r {
        Some(R::Create(c)) => Ok((c.path, stat_of(c.stat))),
        other => Err(unexpected("create", &other)),
    }
}

/// A `GetDataResponse`.
pub(crate) fn data(r: Option<R>) -> Result<(Vec<u8>, Stat), ClientError> {
    match r {
        Some(R::GetData(d)) => Ok((d.data, stat_of(d.stat))),
        other => Err(unexpected("get_data", &other)),
    }
}

/// A `GetChildrenResponse`: names, and the Stat when one was asked.
pub(crate) fn children(r: Option<R>) -> Result<(Vec<String>, Option<Stat>), ClientError> {
    match r {
        Some(R::GetChildren(c)) => Ok((c.children, c.stat.as_ref().map(stat_from_pb))),
        other => Err(unexpected("get_children", &other)),
    }
}

/// A `CountResponse`.
pub(crate) fn count(r: Option<R>) -> Result<i32, ClientError> {
    match r {
        Some(R::Count(c)) => Ok(c.count),
        other => Err(unexpected("count", &other)),
    }
}

/// A `PathsResponse`.
pub(crate) fn paths(r: Option<R>) -> Result<Vec<String>, ClientError> {
    match r {
        Some(R::Paths(p)) => Ok(p.paths),
        other => Err(unexpected("paths", &other)),
    }
}

/// A `GetAclResponse`.
pub(crate) fn acl(r: Option<R>) -> Result<(Vec<Acl>, Stat), ClientError> {
    match r {
        Some(R::GetAcl(a)) => Ok((acl_from_pb(&a.acl), stat_of(a.stat))),
        other => Err(unexpected("get_acl", &other)),
    }
}

/// A `WhoAmIResponse`.
pub(crate) fn identities(r: Option<R>) -> Result<Vec<Id>, ClientError> {
    match r {
        Some(R::WhoAmI(w)) => Ok(w.identities.into_iter().map(|i| Id::new(i.scheme, i.id)).collect()),
        other => Err(unexpected("who_am_i", &other)),
    }
}

/// An answer without a body.
pub(crate) fn empty(r: Option<R>) -> Result<(), ClientError> {
    match r {
        None | Some(R::Empty(_)) => Ok(()),
        other => Err(unexpected("empty", &other)),
    }
}

/// A `MultiResponse`'s results.
pub(crate) fn multi(r: Option<R>) -> Result<Vec<pb::MultiResult>, ClientError> {
    match r {
        Some(R::Multi(m)) => Ok(m.results),
        other => Err(unexpected("multi", &other)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(error: i32, result: Option<R>) -> pb::Response {
        pb::Response { xid: 1, zxid: 2, error, error_path: String::new(), error_message: String::new(), result }
    }

    #[test]
    fn error_codes_become_server_errors_naming_the_path() {
        let err = result(response(-101, None), "/x").unwrap_err();
        assert_eq!(err.to_string(), "NoNode (-101) for /x");
        let mut r = response(-8, None);
        r.error_path = "/given".into();
        r.error_message = "invalid path".into();
        assert_eq!(result(r, "/x").unwrap_err().to_string(), "BadArguments (-8) for /given: invalid path");
        assert!(matches!(result(response(-9999, None), "/x"), Err(ClientError::Protocol(_))));
    }

    #[test]
    fn unexpected_shapes_are_protocol_errors() {
        let count_result = Some(R::Count(pb::CountResponse { count: 3 }));
        assert_eq!(count(count_result.clone()).unwrap(), 3);
        assert!(matches!(stat(count_result), Err(ClientError::Protocol(_))));
        assert!(matches!(data(None), Err(ClientError::Protocol(_))));
        assert!(empty(None).is_ok());
        assert!(empty(Some(R::Empty(pb::Empty {}))).is_ok());
    }
}
