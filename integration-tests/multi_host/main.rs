//! Members on hosts of their own: each in a Linux network namespace with its
//! own IP on a bridge this test creates, members and clients reaching each
//! other by host names the test maps (`zk-1`.. in each namespace's
//! /etc/hosts, which `ip netns exec` puts in place), members binding 0.0.0.0
//! and advertising their names, TLS on every port (mutual between members).
//!
//! `faults`: three members meet real network faults, not process kills:
//!
//! * a follower cut off (its link down), then healed;
//! * the leader isolated from both followers while its own clients still
//!   reach it: the old leader stops acknowledging writes within syncLimit,
//!   the majority elects another and its clients' sessions live on;
//! * packet loss and delay on the leader's link (`tc netem`, or where the
//!   kernel has no `sch_netem`, iptables' statistic match for the loss and
//!   netfilter's queue to a delaying worker for the delay);
//! * a rolling restart of all three members under a write load;
//! * a member with another member's certificate, then with none on its
//!   peer links: refused.
//!
//! After each: exactly one leader serves writes, every member converges,
//! and every acknowledged write is on every member.
//!
//! `membership`: the ensemble changes shape under a write load, by
//! reconfiguration: grows from 3 to 5 members that `--join` from new hosts,
//! shrinks back, replaces a dead member by a new host with the same id and
//! by one with a new id, adds an observer and promotes it. After each step
//! the new shape serves, and at the end every acknowledged write is on every
//! member, and the writer, a kazoo session and a Curator session (all over
//! TLS, `sessions`) kept their sessions.
//!
//! `reads`: the leader cut off from its followers while its own clients
//! still reach it, with a longer syncLimit than theirs: its plain reads go
//! stale, and a `sync`+read or a linearizable read there never does.
//!
//! Clients are writer processes in a client namespace (this test binary run again as a worker,
//! speaking the ZooKeeper protocol over TLS with the `zookeeper-client`
//! crate) that print each write as it is acknowledged; the delayer is such a
//! worker too, in the impaired member's namespace.
//!
//! Needs root (network namespaces), iproute2 and iptables: `make test-multi-host`,
//! which CI runs (one test at a time). Elsewhere it says why it is skipped.
//! Everything it creates (namespaces, /etc/netns entries, processes by PID)
//! is removed at the end.

#[path = "../support/mod.rs"]
mod support;

mod faults;
mod hosts;
mod membership;
mod netns;
mod reads;
mod sessions;
mod workers;
