//! ZooKeeper's request opcodes (`ZooDefs.OpCode`) and the special xids
//! (`ClientCnxn`) that mark packets outside the normal request/reply order.

/// Server → client watch notification (`NOTIFICATION_XID`).
pub const NOTIFICATION_XID: i32 = -1;
/// Ping request and reply (`PING_XID`).
pub const PING_XID: i32 = -2;
/// Auth packet and reply (`AUTHPACKET_XID`).
pub const AUTH_XID: i32 = -4;
/// SetWatches sent by the C and Rust clients (`SET_WATCHES_XID`); the Java
/// client stamps a normal xid instead, so the reply echoes whatever came.
pub const SET_WATCHES_XID: i32 = -8;

/// Every opcode ZooKeeper 3.9 defines; the discriminant is the wire number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum OpCode {
    /// Internal marker for notifications.
    Notification = 0,
    /// create → CreateResponse{path}.
    Create = 1,
    /// delete → no body.
    Delete = 2,
    /// exists → ExistsResponse{stat}.
    Exists = 3,
    /// getData → GetDataResponse{data, stat}.
    GetData = 4,
    /// setData → SetDataResponse{stat}.
    SetData = 5,
    /// getACL → GetACLResponse{acl, stat}.
    GetAcl = 6,
    /// setACL → SetACLResponse{stat}.
    SetAcl = 7,
    /// getChildren → GetChildrenResponse{children}.
    GetChildren = 8,
    /// sync → SyncResponse{path}.
    Sync = 9,
    /// ping (xid -2) → no body.
    Ping = 11,
    /// getChildren2 → GetChildren2Response{children, stat}.
    GetChildren2 = 12,
    /// check; only valid inside multi since 3.9 (ZOOKEEPER-2623).
    Check = 13,
    /// multi → MultiResponse.
    Multi = 14,
    /// create2 → Create2Response{path, stat}.
    Create2 = 15,
    /// reconfig (not served).
    Reconfig = 16,
    /// checkWatches → no body.
    CheckWatches = 17,
    /// removeWatches → no body.
    RemoveWatches = 18,
    /// createContainer → Create2Response.
    CreateContainer = 19,
    /// deleteContainer (server-internal, not served).
    DeleteContainer = 20,
    /// createTTL → Create2Response.
    CreateTtl = 21,
    /// multiRead → MultiResponse.
    MultiRead = 22,
    /// auth (xid -4) → no body.
    Auth = 100,
    /// setWatches → no body.
    SetWatches = 101,
    /// sasl (not served).
    Sasl = 102,
    /// getEphemerals → GetEphemeralsResponse{ephemerals}.
    GetEphemerals = 103,
    /// getAllChildrenNumber → GetAllChildrenNumberResponse{totalNumber}.
    GetAllChildrenNumber = 104,
    /// setWatches2 → no body.
    SetWatches2 = 105,
    /// addWatch → ErrorResponse{0}.
    AddWatch = 106,
    /// whoAmI → WhoAmIResponse{clientInfo}.
    WhoAmI = 107,
    /// Marks an error result inside a MultiResponse.
    Error = -1,
    /// Internal transaction; on the wire a session starts with a ConnectRequest.
    CreateSession = -10,
    /// closeSession → no body, then the server closes the connection.
    CloseSession = -11,
}

impl OpCode {
    /// The wire number.
    pub fn code(self) -> i32 {
        self as i32
    }

    /// The opcode for a wire number; `None` for numbers ZooKeeper does not define.
    pub fn from_code(code: i32) -> Option<OpCode> {
        use OpCode::*;
        Some(match code {
            0 => Notification,
            1 => Create,
            2 => Delete,
            3 => Exists,
            4 => GetData,
            5 => SetData,
            6 => GetAcl,
            7 => SetAcl,
            8 => GetChildren,
            9 => Sync,
            11 => Ping,
            12 => GetChildren2,
            13 => Check,
            14 => Multi,
            15 => Create2,
            16 => Reconfig,
            17 => CheckWatches,
            18 => RemoveWatches,
            19 => CreateContainer,
            20 => DeleteContainer,
            21 => CreateTtl,
            22 => MultiRead,
            100 => Auth,
            101 => SetWatches,
            102 => Sasl,
            103 => GetEphemerals,
            104 => GetAllChildrenNumber,
            105 => SetWatches2,
            106 => AddWatch,
            107 => WhoAmI,
            -1 => Error,
            -10 => CreateSession,
            -11 => CloseSession,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_opcode_round_trips_through_its_number() {
        let mut seen = 0;
        for n in -20..=200 {
            if let Some(op) = OpCode::from_code(n) {
                assert_eq!(op.code(), n);
                seen += 1;
            }
        }
        assert_eq!(seen, 33);
        assert_eq!(OpCode::from_code(10), None);
        assert_eq!(OpCode::CreateTtl.code(), 21);
        assert_eq!(OpCode::WhoAmI.code(), 107);
    }
}
