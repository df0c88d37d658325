//! proptest strategies: every record type, and requests and replies in the
//! canonical form the decoders produce (so a round trip must be the identity).

use crate::acl::{Acl, Id};
use crate::data::Data;
use crate::error::{ErrorCode, ZkError};
use crate::op::{MultiItem, Op, OpResult, Reply};
use crate::tree::stat::{CreateMode, Stat};
use crate::tree::watch::{AddWatchMode, EventType, WatchEvent, WatcherType};
use crate::wire::codec::ReplyShape;
use crate::wire::opcode::OpCode;
use bytes::Bytes;
use proptest::prelude::*;
use proptest::strategy::BoxedStrategy;

/// A type with a default strategy (proptest's `Arbitrary` cannot be
/// implemented for `Bytes`, a foreign type).
pub(crate) trait Gen: Sized + std::fmt::Debug {
    /// The strategy.
    fn strategy() -> BoxedStrategy<Self>;
}

impl Gen for i32 {
    fn strategy() -> BoxedStrategy<Self> {
        any::<i32>().boxed()
    }
}

impl Gen for i64 {
    fn strategy() -> BoxedStrategy<Self> {
        any::<i64>().boxed()
    }
}

impl Gen for bool {
    fn strategy() -> BoxedStrategy<Self> {
        any::<bool>().boxed()
    }
}

impl Gen for String {
    /// Any characters, NUL and non-BMP ones included.
    fn strategy() -> BoxedStrategy<Self> {
        proptest::collection::vec(any::<char>(), 0..12).prop_map(|cs| cs.into_iter().collect()).boxed()
    }
}

impl Gen for Bytes {
    fn strategy() -> BoxedStrategy<Self> {
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(Bytes::from).boxed()
    }
}

/// Data: bytes, now and then null, so round trips keep the two apart.
impl Gen for Data {
    fn strategy() -> BoxedStrategy<Self> {
        prop_oneof![1 => Just(Data::NULL), 4 => Bytes::strategy().prop_map(Data::from)].boxed()
    }
}

impl<T: Gen + 'static> Gen for Vec<T> {
    fn strategy() -> BoxedStrategy<Self> {
        proptest::collection::vec(T::strategy(), 0..4).boxed()
    }
}

impl Gen for Id {
    fn strategy() -> BoxedStrategy<Self> {
        (String::strategy(), String::strategy()).prop_map(|(scheme, id)| Id { scheme, id }).boxed()
    }
}

impl Gen for Acl {
    fn strategy() -> BoxedStrategy<Self> {
        (any::<i32>(), Id::strategy()).prop_map(|(perms, id)| Acl { perms, id }).boxed()
    }
}

impl Gen for Stat {
    fn strategy() -> BoxedStrategy<Self> {
        (
            (any::<i64>(), any::<i64>(), any::<i64>(), any::<i64>()),
            (any::<i32>(), any::<i32>(), any::<i32>()),
            (any::<i64>(), any::<i32>(), any::<i32>(), any::<i64>()),
        )
            .prop_map(|((czxid, mzxid, ctime, mtime), (version, cversion, aversion), (owner, dl, nc, pzxid))| Stat {
                czxid,
                mzxid,
                ctime,
                mtime,
                version,
                cversion,
                aversion,
                ephemeral_owner: owner,
                data_length: dl,
                num_children: nc,
                pzxid,
            })
            .boxed()
    }
}

fn path() -> BoxedStrategy<String> {
    String::strategy()
}

fn mode() -> impl Strategy<Value = CreateMode> {
    (0..=6).prop_filter_map("valid flag", CreateMode::from_flag)
}

fn watcher_type() -> impl Strategy<Value = WatcherType> {
    (1..=5).prop_filter_map("valid type", WatcherType::from_code)
}

fn add_watch_mode() -> impl Strategy<Value = AddWatchMode> {
    (0..=1).prop_filter_map("valid mode", AddWatchMode::from_code)
}

/// Any error code, OK included.
pub(crate) fn error_code() -> impl Strategy<Value = ErrorCode> {
    (-130..=0).prop_filter_map("defined code", ErrorCode::from_code)
}

/// Any error code but OK.
fn failure() -> impl Strategy<Value = ErrorCode> {
    error_code().prop_filter("not OK", |c| *c != ErrorCode::Ok)
}

/// Any watch event a server sends.
pub(crate) fn watch_event() -> impl Strategy<Value = WatchEvent> {
    ((-1..=7).prop_filter_map("event type", EventType::from_code), path(), any::<i64>())
        .prop_map(|(event_type, path, zxid)| WatchEvent { event_type, path, zxid })
}

/// A create as a standalone request: its opcode and op.
fn standalone_create() -> impl Strategy<Value = (OpCode, Op)> {
    (0..3usize, path(), Data::strategy(), Vec::<Acl>::strategy(), mode(), any::<i64>(), any::<bool>()).prop_map(
        |(kind, path, data, acl, mode, ttl, legacy)| match kind {
            0 => {
                let opcode = if legacy { OpCode::Create } else { OpCode::Create2 };
                (opcode, Op::Create { path, data, acl, mode, ttl_ms: -1 })
            }
            1 => (OpCode::CreateContainer, Op::Create { path, data, acl, mode: CreateMode::Container, ttl_ms: -1 }),
            _ => (OpCode::CreateTtl, Op::Create { path, data, acl, mode, ttl_ms: ttl }),
        },
    )
}

/// A create inside multi, with the sub-op opcode ZooKeeper reports for it.
fn multi_create() -> impl Strategy<Value = (OpCode, Op)> {
    (path(), Data::strategy(), Vec::<Acl>::strategy(), mode(), any::<i64>(), any::<bool>()).prop_map(
        |(path, data, acl, mode, ttl, legacy)| {
            if mode.is_ttl() {
                (OpCode::CreateTtl, Op::Create { path, data, acl, mode, ttl_ms: ttl })
            } else if mode.is_container() {
                (OpCode::CreateContainer, Op::Create { path, data, acl, mode, ttl_ms: -1 })
            } else {
                let opcode = if legacy { OpCode::Create } else { OpCode::Create2 };
                (opcode, Op::Create { path, data, acl, mode, ttl_ms: -1 })
            }
        },
    )
}

/// One op of a multi.
fn write_sub_op() -> impl Strategy<Value = (OpCode, Op)> {
    prop_oneof![
        multi_create(),
        (path(), any::<i32>()).prop_map(|(path, version)| (OpCode::Delete, Op::Delete { path, version })),
        (path(), Data::strategy(), any::<i32>())
            .prop_map(|(path, data, version)| (OpCode::SetData, Op::SetData { path, data, version })),
        (path(), any::<i32>()).prop_map(|(path, version)| (OpCode::Check, Op::Check { path, version })),
    ]
}

/// One op of a multiRead (never with a watch).
fn read_sub_op() -> impl Strategy<Value = (OpCode, Op)> {
    prop_oneof![
        path().prop_map(|path| (OpCode::GetData, Op::GetData { path, watch: false })),
        path().prop_map(|path| (OpCode::GetChildren, Op::GetChildren { path, watch: false, with_stat: false })),
    ]
}

fn multi_of(sub: impl Strategy<Value = (OpCode, Op)>, read: bool) -> impl Strategy<Value = (ReplyShape, Op)> {
    proptest::collection::vec(sub, 0..5).prop_map(move |pairs| {
        let (sub_ops, ops): (Vec<OpCode>, Vec<Op>) = pairs.into_iter().unzip();
        let (opcode, op) = if read { (OpCode::MultiRead, Op::MultiRead(ops)) } else { (OpCode::Multi, Op::Multi(ops)) };
        (ReplyShape { opcode, sub_ops }, op)
    })
}

fn single(opcode: OpCode, op: impl Strategy<Value = Op>) -> impl Strategy<Value = (ReplyShape, Op)> {
    op.prop_map(move |op| (ReplyShape::from(opcode), op))
}

/// Every request a client may send that we serve, in decoded form.
pub(crate) fn request() -> impl Strategy<Value = (ReplyShape, Op)> {
    let watches = || Vec::<String>::strategy();
    prop_oneof![
        standalone_create().prop_map(|(opcode, op)| (ReplyShape::from(opcode), op)),
        single(OpCode::Delete, (path(), any::<i32>()).prop_map(|(path, version)| Op::Delete { path, version })),
        single(OpCode::Exists, (path(), any::<bool>()).prop_map(|(path, watch)| Op::Exists { path, watch })),
        single(OpCode::GetData, (path(), any::<bool>()).prop_map(|(path, watch)| Op::GetData { path, watch })),
        single(
            OpCode::SetData,
            (path(), Data::strategy(), any::<i32>()).prop_map(|(path, data, version)| Op::SetData {
                path,
                data,
                version
            })
        ),
        single(OpCode::GetAcl, path().prop_map(|path| Op::GetAcl { path })),
        single(
            OpCode::SetAcl,
            (path(), Vec::<Acl>::strategy(), any::<i32>()).prop_map(|(path, acl, version)| Op::SetAcl {
                path,
                acl,
                version
            })
        ),
        single(
            OpCode::GetChildren,
            (path(), any::<bool>()).prop_map(|(path, watch)| Op::GetChildren { path, watch, with_stat: false })
        ),
        single(
            OpCode::GetChildren2,
            (path(), any::<bool>()).prop_map(|(path, watch)| Op::GetChildren { path, watch, with_stat: true })
        ),
        single(OpCode::Sync, path().prop_map(|path| Op::Sync { path })),
        multi_of(write_sub_op(), false),
        multi_of(read_sub_op(), true),
        single(OpCode::CheckWatches, (path(), watcher_type()).prop_map(|(path, kind)| Op::CheckWatches { path, kind })),
        single(
            OpCode::RemoveWatches,
            (path(), watcher_type()).prop_map(|(path, kind)| Op::RemoveWatches { path, kind })
        ),
        single(
            OpCode::SetWatches,
            (any::<i64>(), watches(), watches(), watches()).prop_map(|(relative_zxid, data, exist, child)| {
                Op::SetWatches { relative_zxid, data, exist, child, persistent: vec![], persistent_recursive: vec![] }
            })
        ),
        single(
            OpCode::SetWatches2,
            (any::<i64>(), watches(), watches(), watches(), watches(), watches()).prop_map(
                |(relative_zxid, data, exist, child, persistent, persistent_recursive)| Op::SetWatches {
                    relative_zxid,
                    data,
                    exist,
                    child,
                    persistent,
                    persistent_recursive
                }
            )
        ),
        single(OpCode::AddWatch, (path(), add_watch_mode()).prop_map(|(path, mode)| Op::AddWatch { path, mode })),
        single(OpCode::GetEphemerals, path().prop_map(|prefix| Op::GetEphemerals { prefix })),
        single(OpCode::GetAllChildrenNumber, path().prop_map(|path| Op::GetAllChildrenNumber { path })),
        single(
            OpCode::Auth,
            (String::strategy(), Bytes::strategy()).prop_map(|(scheme, auth)| Op::Auth { scheme, auth })
        ),
        single(OpCode::Ping, Just(Op::Ping)),
        single(OpCode::WhoAmI, Just(Op::WhoAmI)),
        single(OpCode::CloseSession, Just(Op::CloseSession)),
    ]
}

/// A successful result for a multi sub-op, as a client decodes it back.
fn sub_result(opcode: OpCode) -> BoxedStrategy<OpResult> {
    match opcode {
        OpCode::Create => path().prop_map(|path| OpResult::Created { path, stat: Stat::default() }).boxed(),
        OpCode::Create2 | OpCode::CreateContainer | OpCode::CreateTtl => {
            (path(), Stat::strategy()).prop_map(|(path, stat)| OpResult::Created { path, stat }).boxed()
        }
        OpCode::SetData => Stat::strategy().prop_map(OpResult::Stat).boxed(),
        OpCode::GetData => {
            (Data::strategy(), Stat::strategy()).prop_map(|(data, stat)| OpResult::Data { data, stat }).boxed()
        }
        OpCode::GetChildren => {
            Vec::<String>::strategy().prop_map(|children| OpResult::Children { children, stat: None }).boxed()
        }
        _ => Just(OpResult::Empty).boxed(),
    }
}

fn multi_reply(sub: impl Strategy<Value = OpCode> + 'static, opcode: OpCode) -> BoxedStrategy<(ReplyShape, Reply)> {
    proptest::collection::vec(
        sub.prop_flat_map(|op| {
            let item = prop_oneof![sub_result(op).prop_map(MultiItem::Ok), error_code().prop_map(MultiItem::Err)];
            (Just(op), item)
        }),
        0..5,
    )
    .prop_map(move |pairs| {
        let (sub_ops, items): (Vec<OpCode>, Vec<MultiItem>) = pairs.into_iter().unzip();
        (ReplyShape { opcode, sub_ops }, Ok(OpResult::Multi(items)))
    })
    .boxed()
}

/// An identity whose whoAmI user name is the id itself (digest ids without ':').
fn identity() -> impl Strategy<Value = Id> {
    (prop::sample::select(vec!["digest", "ip", "super", "x509", ""]), String::strategy()).prop_map(|(scheme, id)| {
        let id = if scheme == "digest" { id.replace(':', "") } else { id };
        Id::new(scheme, id)
    })
}

/// A successful reply to a standalone request.
fn ok(opcode: OpCode, result: BoxedStrategy<OpResult>) -> BoxedStrategy<(ReplyShape, Reply)> {
    result.prop_map(move |r| (ReplyShape::from(opcode), Ok(r))).boxed()
}

/// A successful reply without a body.
fn empty(opcode: OpCode) -> BoxedStrategy<(ReplyShape, Reply)> {
    ok(opcode, Just(OpResult::Empty).boxed())
}

/// Every successful reply, in the form a client decodes it back.
fn success() -> impl Strategy<Value = (ReplyShape, Reply)> {
    let stat = || Stat::strategy().prop_map(OpResult::Stat).boxed();
    prop_oneof![
        ok(OpCode::Create, sub_result(OpCode::Create)),
        prop::sample::select(vec![OpCode::Create2, OpCode::CreateContainer, OpCode::CreateTtl])
            .prop_flat_map(|opcode| ok(opcode, sub_result(opcode))),
        ok(OpCode::Exists, stat()),
        ok(OpCode::SetData, stat()),
        ok(OpCode::SetAcl, stat()),
        ok(OpCode::GetData, sub_result(OpCode::GetData)),
        ok(
            OpCode::GetAcl,
            (Vec::<Acl>::strategy(), Stat::strategy()).prop_map(|(acl, stat)| OpResult::Acl { acl, stat }).boxed()
        ),
        ok(OpCode::GetChildren, sub_result(OpCode::GetChildren)),
        ok(
            OpCode::GetChildren2,
            (Vec::<String>::strategy(), Stat::strategy())
                .prop_map(|(children, stat)| OpResult::Children { children, stat: Some(stat) })
                .boxed()
        ),
        ok(OpCode::Sync, path().prop_map(OpResult::Synced).boxed()),
        multi_reply(
            prop::sample::select(vec![
                OpCode::Create,
                OpCode::Create2,
                OpCode::CreateContainer,
                OpCode::CreateTtl,
                OpCode::Delete,
                OpCode::SetData,
                OpCode::Check
            ]),
            OpCode::Multi
        ),
        multi_reply(prop::sample::select(vec![OpCode::GetData, OpCode::GetChildren]), OpCode::MultiRead),
        ok(OpCode::GetEphemerals, Vec::<String>::strategy().prop_map(OpResult::Paths).boxed()),
        ok(OpCode::GetAllChildrenNumber, any::<i32>().prop_map(OpResult::Count).boxed()),
        ok(OpCode::WhoAmI, proptest::collection::vec(identity(), 0..4).prop_map(OpResult::Identities).boxed()),
        prop::sample::select(vec![
            OpCode::Delete,
            OpCode::AddWatch,
            OpCode::SetWatches,
            OpCode::SetWatches2,
            OpCode::CheckWatches,
            OpCode::RemoveWatches,
            OpCode::CloseSession,
            OpCode::Ping,
            OpCode::Auth
        ])
        .prop_flat_map(empty),
    ]
}

/// Every reply, failures (header only) included, in the form a client decodes it back.
pub(crate) fn reply() -> impl Strategy<Value = (ReplyShape, Reply)> {
    prop_oneof![
        3 => success(),
        1 => (success(), failure()).prop_map(|((shape, _), code)| (shape, Err(ZkError::new(code, "")))),
    ]
}
