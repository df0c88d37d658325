//! `multi` and `multi_read` in the session stream's protobuf: the requests
//! built from the ops, and the answers decoded into their results.

use super::convert::{create_request, stat_from_pb};
use super::error::ClientError;
use super::multi::{MultiOp, MultiResult, ReadOp, ReadResult};
use crate::proto::client as pb;
use zabkeeper_core::error::{ErrorCode, ZkError};

/// One op in its protobuf form.
fn op_to_pb(op: &MultiOp) -> pb::MultiOp {
    use pb::multi_op::Op;
    let op = match op {
        MultiOp::Create { path, data, acl, mode, ttl } => Op::Create(create_request(path, data, *mode, acl, *ttl)),
        MultiOp::Delete { path, version } => Op::Delete(pb::DeleteRequest { path: path.clone(), version: *version }),
        MultiOp::SetData { path, data, version } => {
            Op::SetData(pb::SetDataRequest { path: path.clone(), data: data.clone(), version: *version })
        }
        MultiOp::Check { path, version } => Op::Check(pb::CheckRequest { path: path.clone(), version: *version }),
    };
    pb::MultiOp { op: Some(op) }
}

/// The multi request for `ops`.
pub(crate) fn multi_request(ops: &[MultiOp]) -> pb::request::Op {
    pb::request::Op::Multi(pb::MultiRequest { ops: ops.iter().map(op_to_pb).collect() })
}

fn code_of(n: i32) -> Result<ErrorCode, ClientError> {
    ErrorCode::from_code(n).ok_or_else(|| ClientError::Protocol(format!("unknown error code {n}")))
}

/// Decodes a multi response for `ops`: the results, or `MultiFailed` naming the
/// first failing op (with every op's outcome kept).
pub(crate) fn decode_multi(ops: &[MultiOp], results: Vec<pb::MultiResult>) -> Result<Vec<MultiResult>, ClientError> {
    if results.len() != ops.len() {
        return Err(ClientError::Protocol(format!(
            "multi of {} ops answered with {} results",
            ops.len(),
            results.len()
        )));
    }
    if let Some(index) = results.iter().position(|r| r.error != 0) {
        let code = code_of(results[index].error)?;
        let all = results.iter().map(|r| code_of(r.error).map(MultiResult::Error)).collect::<Result<Vec<_>, _>>()?;
        return Err(ClientError::MultiFailed { index, error: ZkError::new(code, ops[index].path()), results: all });
    }
    use pb::multi_result::Result as R;
    ops.iter()
        .zip(results)
        .enumerate()
        .map(|(i, (op, r))| match (op, r.result) {
            (MultiOp::Create { .. }, Some(R::Create(c))) => {
                Ok(MultiResult::Created { path: c.path, stat: c.stat.as_ref().map(stat_from_pb).unwrap_or_default() })
            }
            (MultiOp::SetData { .. }, Some(R::Stat(s))) => {
                Ok(MultiResult::DataSet(s.stat.as_ref().map(stat_from_pb).unwrap_or_default()))
            }
            (MultiOp::Delete { .. }, Some(R::Empty(_)) | None) => Ok(MultiResult::Deleted),
            (MultiOp::Check { .. }, Some(R::Empty(_) | R::Stat(_)) | None) => Ok(MultiResult::Checked),
            (op, other) => Err(ClientError::Protocol(format!(
                "multi op #{i} ({}) answered with an unexpected result {other:?}",
                op.path()
            ))),
        })
        .collect()
}

/// The multi_read request for `ops`.
pub(crate) fn multi_read_request(ops: &[ReadOp]) -> pb::request::Op {
    use pb::multi_read_op::Op;
    let ops = ops
        .iter()
        .map(|op| pb::MultiReadOp {
            op: Some(match op {
                ReadOp::GetData(path) => Op::GetData(pb::GetDataRequest { path: path.clone(), watch: false }),
                ReadOp::GetChildren(path) => {
                    Op::GetChildren(pb::GetChildrenRequest { path: path.clone(), watch: false, with_stat: false })
                }
            }),
        })
        .collect();
    pb::request::Op::MultiRead(pb::MultiReadRequest { ops })
}

/// Decodes a multi_read answer. The server sends a `MultiResponse` when no
/// read succeeded (only codes to report), so both shapes are accepted.
pub(crate) fn decode_multi_read(
    ops: &[ReadOp],
    result: Option<pb::response::Result>,
) -> Result<Vec<Result<ReadResult, ZkError>>, ClientError> {
    use pb::multi_read_result::Result as R;
    let items: Vec<(i32, Option<R>)> = match result {
        Some(pb::response::Result::MultiRead(m)) => m.results.into_iter().map(|r| (r.error, r.result)).collect(),
        Some(pb::response::Result::Multi(m)) if m.results.iter().all(|r| r.error != 0) => {
            m.results.into_iter().map(|r| (r.error, None)).collect()
        }
        other => return Err(ClientError::Protocol(format!("multi_read answered with {other:?}"))),
    };
    if items.len() != ops.len() {
        return Err(ClientError::Protocol(format!(
            "multi_read of {} ops answered with {} results",
            ops.len(),
            items.len()
        )));
    }
    ops.iter()
        .zip(items)
        .map(|(op, (error, result))| {
            if error != 0 {
                return Ok(Err(ZkError::new(code_of(error)?, op.path())));
            }
            match (op, result) {
                (ReadOp::GetData(_), Some(R::GetData(d))) => Ok(Ok(ReadResult::Data {
                    data: d.data,
                    stat: d.stat.as_ref().map(stat_from_pb).unwrap_or_default(),
                })),
                (ReadOp::GetChildren(_), Some(R::GetChildren(c))) => Ok(Ok(ReadResult::Children(c.children))),
                (op, other) => Err(ClientError::Protocol(format!(
                    "multi_read op on {} answered with an unexpected result {other:?}",
                    op.path()
                ))),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::acl::Acl;
    use crate::tree::stat::{CreateMode, Stat};
    use pb::multi_result::Result as R;

    fn ok(result: R) -> pb::MultiResult {
        pb::MultiResult { error: 0, result: Some(result) }
    }

    fn err(code: ErrorCode) -> pb::MultiResult {
        pb::MultiResult { error: code.code(), result: None }
    }

    #[test]
    fn successful_multi_maps_each_op_to_its_result() {
        let ops = vec![
            MultiOp::create("/a", b"x", CreateMode::Persistent, &Acl::open_unsafe()),
            MultiOp::set_data("/b", b"y", 3),
            MultiOp::delete("/c", -1),
            MultiOp::check("/d", 0),
        ];
        let stat = pb::Stat { version: 4, ..Default::default() };
        let results = vec![
            ok(R::Create(pb::CreateResponse { path: "/a".into(), stat: Some(stat) })),
            ok(R::Stat(pb::StatResponse { stat: Some(stat) })),
            ok(R::Empty(pb::Empty {})),
            ok(R::Empty(pb::Empty {})),
        ];
        let got = decode_multi(&ops, results).unwrap();
        let s = stat_from_pb(&stat);
        assert_eq!(
            got,
            vec![
                MultiResult::Created { path: "/a".into(), stat: s },
                MultiResult::DataSet(s),
                MultiResult::Deleted,
                MultiResult::Checked
            ]
        );
    }

    #[test]
    fn failed_multi_names_the_first_failing_op_and_keeps_every_result() {
        let ops = vec![MultiOp::check("/a", 0), MultiOp::delete("/b", 2), MultiOp::set_data("/c", b"", -1)];
        let results = vec![
            pb::MultiResult { error: 0, result: None },
            err(ErrorCode::BadVersion),
            err(ErrorCode::RuntimeInconsistency),
        ];
        let Err(ClientError::MultiFailed { index, error, results }) = decode_multi(&ops, results) else {
            panic!("expected MultiFailed")
        };
        assert_eq!(index, 1);
        assert_eq!(error, ZkError::new(ErrorCode::BadVersion, "/b"));
        assert_eq!(
            results,
            vec![
                MultiResult::Error(ErrorCode::Ok),
                MultiResult::Error(ErrorCode::BadVersion),
                MultiResult::Error(ErrorCode::RuntimeInconsistency)
            ]
        );
    }

    #[test]
    fn malformed_multi_answers_are_protocol_errors_not_panics() {
        let ops = vec![MultiOp::check("/a", 0)];
        assert!(matches!(decode_multi(&ops, vec![]), Err(ClientError::Protocol(_))));
        let wrong = vec![ok(R::Create(pb::CreateResponse::default()))];
        assert!(matches!(decode_multi(&ops, wrong), Err(ClientError::Protocol(_))));
        let unknown = vec![pb::MultiResult { error: -9999, result: None }];
        assert!(matches!(decode_multi(&ops, unknown), Err(ClientError::Protocol(_))));
    }

    #[test]
    fn multi_read_keeps_per_op_errors_and_accepts_the_all_errors_shape() {
        use pb::multi_read_result::Result as RR;
        let ops = vec![ReadOp::GetData("/a".into()), ReadOp::GetChildren("/b".into())];
        let answer = pb::response::Result::MultiRead(pb::MultiReadResponse {
            results: vec![
                pb::MultiReadResult {
                    error: 0,
                    result: Some(RR::GetData(pb::GetDataResponse { data: b"v".to_vec(), stat: None })),
                },
                pb::MultiReadResult { error: ErrorCode::NoNode.code(), result: None },
            ],
        });
        let got = decode_multi_read(&ops, Some(answer)).unwrap();
        assert_eq!(got[0], Ok(ReadResult::Data { data: b"v".to_vec(), stat: Stat::default() }));
        assert_eq!(got[1], Err(ZkError::new(ErrorCode::NoNode, "/b")));

        let all_failed = pb::response::Result::Multi(pb::MultiResponse {
            results: vec![err(ErrorCode::NoNode), err(ErrorCode::NoAuth)],
        });
        let got = decode_multi_read(&ops, Some(all_failed)).unwrap();
        assert_eq!(got[1], Err(ZkError::new(ErrorCode::NoAuth, "/b")));
        assert!(matches!(decode_multi_read(&ops, None), Err(ClientError::Protocol(_))));
    }
}
