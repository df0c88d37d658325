//! The recipes against a real replica in this process (`testing::test_server`):
//! mutual exclusion and order, no herd effect, expiry and cancellation
//! freeing a place, barriers holding and releasing, queue items taken exactly
//! once, counters under contention. Every wait is bounded.

use super::test_server::{connect, Proxy, TestServer};
use crate::testing::{eventually, within};
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use zabkeeper_client::recipes::*;
use zabkeeper_client::{Client, ClientError};
use zabkeeper_core::acl::Acl;
use zabkeeper_core::error::ErrorCode;
use zabkeeper_core::tree::stat::CreateMode;
use zabkeeper_core::tree::watch::WatcherType;

/// The contender nodes of `prefix` in `dir`, lowest first.
async fn queue_of(client: &Client, dir: &str, prefix: &str) -> Vec<String> {
    ticket::contenders(client.get_children(dir).await.expect("list the recipe's directory"), prefix)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_admits_one_holder_at_a_time_and_leaves_nothing_behind() {
    let server = TestServer::fresh().await;
    let inside = Arc::new(AtomicUsize::new(0));
    let entries = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let client = connect(&server.address()).await;
        let (inside, entries) = (inside.clone(), entries.clone());
        tasks.push(tokio::spawn(async move {
            let lock = Lock::new(&client, "/locks/a");
            for _ in 0..5 {
                let guard = lock.acquire().await.expect("acquire");
                assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders at once");
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                entries.fetch_add(1, Ordering::SeqCst);
                guard.release().await.expect("release");
            }
            client.close().await.expect("close");
        }));
    }
    for task in tasks {
        within(60, task).await.expect("a contender task");
    }
    assert_eq!(entries.load(Ordering::SeqCst), 20);
    let observer = connect(&server.address()).await;
    assert_eq!(observer.get_children("/locks/a").await.unwrap(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_waiters_watch_only_their_predecessor_and_are_served_in_order() {
    let server = TestServer::fresh().await;
    let holder_client = connect(&server.address()).await;
    let holder = Lock::new(&holder_client, "/locks/herd").acquire().await.expect("the first acquire");
    let mut waiters = Vec::new();
    let (order_tx, mut order) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..3 {
        let client = connect(&server.address()).await;
        let order_tx = order_tx.clone();
        let waiter_client = client.clone();
        let task = tokio::spawn(async move {
            let guard = Lock::new(&waiter_client, "/locks/herd").acquire().await.expect("acquire");
            order_tx.send(i).expect("the test listens");
            guard
        });
        waiters.push((client, task));
        // Queue them one after another so their order is known.
        let n = i + 2;
        eventually(5, "the waiter queues", || async {
            queue_of(&holder_client, "/locks/herd", "lock-").await.len() == n
        })
        .await;
    }
    let nodes = queue_of(&holder_client, "/locks/herd", "lock-").await;
    let path = |i: usize| format!("/locks/herd/{}", nodes[i]);
    assert_eq!(path(0), holder.path());
    for (i, (client, _)) in waiters.iter().enumerate() {
        client.check_watches(&path(i), WatcherType::Data).await.expect("a waiter watches its predecessor");
        for other in (0..=3).filter(|&j| j != i) {
            let err = client.check_watches(&path(other), WatcherType::Data).await.unwrap_err();
            assert!(err.is_server_code(ErrorCode::NoWatcher), "waiter {i} also watches node {other}: {err}");
        }
    }
    holder.release().await.expect("release");
    for (expected, (_, task)) in waiters.iter_mut().enumerate() {
        let got = within(10, order.recv()).await.expect("a waiter acquires");
        assert_eq!(got, expected, "waiters acquire in queue order");
        let guard = within(10, task).await.expect("the waiter task");
        // Only the next waiter woke: nobody else holds the lock yet.
        assert!(order.try_recv().is_err(), "a release woke more than one waiter");
        guard.release().await.expect("release");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn try_acquire_gives_up_cleanly_and_a_closed_holder_frees_the_lock() {
    let server = TestServer::fresh().await;
    let holder_client = connect(&server.address()).await;
    let other = connect(&server.address()).await;
    let _held = Lock::new(&holder_client, "/l").acquire().await.unwrap();
    let lock = Lock::new(&other, "/l");
    assert!(lock.try_acquire_for(Duration::from_millis(200)).await.unwrap().is_none());
    assert_eq!(queue_of(&other, "/l", "lock-").await.len(), 1, "a timed-out attempt removes its node");

    // A cancelled acquire removes its node too (in the background).
    let cancelled = tokio::time::timeout(Duration::from_millis(200), lock.acquire()).await;
    assert!(cancelled.is_err());
    eventually(5, "the cancelled attempt's node goes", || async { queue_of(&other, "/l", "lock-").await.len() == 1 })
        .await;

    let waiting = tokio::spawn(async move { lock.acquire().await });
    holder_client.close().await.unwrap();
    let guard = within(10, waiting).await.expect("task").expect("acquire after the holder's session ended");
    assert_eq!(queue_of(&other, "/l", "lock-").await, vec![guard.path().rsplit('/').next().unwrap().to_string()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_is_kept_across_a_cut_connection_and_lost_when_its_node_goes() {
    let server = TestServer::fresh().await;
    let mut proxy = Proxy::start(server.port).await;
    let holder_client = connect(&proxy.address()).await;
    let admin = connect(&server.address()).await;
    let guard = Lock::new(&holder_client, "/cut").acquire().await.unwrap();
    let waiting = {
        let client = connect(&server.address()).await;
        tokio::spawn(async move { Lock::new(&client, "/cut").try_acquire_for(Duration::from_millis(600)).await })
    };
    proxy.cut();
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.resume().await;
    // The session resumed within its timeout: the holder still holds.
    assert!(within(10, waiting).await.expect("task").expect("try_acquire").is_none());
    assert_eq!(queue_of(&admin, "/cut", "lock-").await.first().map(|n| format!("/cut/{n}")), Some(guard.path().into()));

    let lost = guard.lost();
    admin.delete(guard.path(), -1).await.unwrap();
    within(10, lost).await.expect("the holder learns its lock is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn election_elects_in_order_and_reports_the_leader() {
    let server = TestServer::fresh().await;
    let address = server.address();
    let clients: Vec<Client> = futures::future::join_all((0..3).map(|_| connect(&address))).await;
    let election = |i: usize| Election::new(&clients[i], "/election/service");
    assert_eq!(election(0).leader().await.unwrap(), None);

    let first = election(0).campaign(b"a").await.unwrap();
    let second = tokio::spawn({
        let e = election(1);
        async move { e.campaign(b"b").await }
    });
    eventually(5, "b queues", || async { queue_of(&clients[2], "/election/service", "n_").await.len() == 2 }).await;
    let third = tokio::spawn({
        let e = election(2);
        async move { e.campaign(b"c").await }
    });
    eventually(5, "c queues", || async { queue_of(&clients[2], "/election/service", "n_").await.len() == 3 }).await;
    assert_eq!(election(2).leader().await.unwrap(), Some(b"a".to_vec()));
    first.proclaim(b"a2").await.unwrap();
    assert_eq!(election(1).leader().await.unwrap(), Some(b"a2".to_vec()));
    assert!(!second.is_finished() && !third.is_finished());

    first.resign().await.unwrap();
    let second = within(10, second).await.expect("task").expect("b is elected");
    assert_eq!(election(0).leader().await.unwrap(), Some(b"b".to_vec()));
    assert!(!third.is_finished(), "c was elected while b leads");

    // The leader's session ends without resigning: c takes over, and b's
    // leadership reports the loss.
    let lost = second.lost();
    clients[1].close().await.unwrap();
    within(10, lost).await.expect("b learns it lost");
    let third = within(10, third).await.expect("task").expect("c is elected");
    assert_eq!(election(0).leader().await.unwrap(), Some(b"c".to_vec()));
    third.resign().await.unwrap();
    assert_eq!(election(0).leader().await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_barrier_holds_waiters_until_removed() {
    let server = TestServer::fresh().await;
    let a = connect(&server.address()).await;
    let b = connect(&server.address()).await;
    let barrier = Barrier::new(&a, "/barriers/start");
    barrier.set().await.unwrap();
    barrier.set().await.expect("setting twice is fine");
    let waiter = Barrier::new(&b, "/barriers/start");
    assert!(!waiter.wait_for(Duration::from_millis(200)).await.unwrap(), "the barrier is up");
    let released = tokio::spawn(async move { waiter.wait().await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!released.is_finished());
    barrier.remove().await.unwrap();
    within(10, released).await.expect("task").expect("released");
    barrier.remove().await.expect("removing twice is fine");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_double_barrier_starts_and_finishes_its_members_together() {
    let server = TestServer::fresh().await;
    const SIZE: usize = 3;
    for round in 0..2 {
        let arrived = Arc::new(AtomicUsize::new(0));
        let leaving = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for i in 0..SIZE {
            let client = connect(&server.address()).await;
            let (arrived, leaving) = (arrived.clone(), leaving.clone());
            tasks.push(tokio::spawn(async move {
                // Members arrive and finish at different times.
                tokio::time::sleep(Duration::from_millis(60 * i as u64)).await;
                arrived.fetch_add(1, Ordering::SeqCst);
                let member = DoubleBarrier::new(&client, "/barriers/double", SIZE).enter().await.expect("enter");
                assert_eq!(arrived.load(Ordering::SeqCst), SIZE, "round {round}: entered before everyone arrived");
                tokio::time::sleep(Duration::from_millis(60 * (SIZE - i) as u64)).await;
                leaving.fetch_add(1, Ordering::SeqCst);
                member.leave().await.expect("leave");
                assert_eq!(leaving.load(Ordering::SeqCst), SIZE, "round {round}: left before everyone finished");
                client.close().await.expect("close");
            }));
        }
        for task in tasks {
            within(30, task).await.expect("a member task");
        }
    }
    let observer = connect(&server.address()).await;
    assert_eq!(observer.get_children("/barriers/double").await.unwrap(), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_is_fifo_and_gives_each_item_to_exactly_one_consumer() {
    let server = TestServer::fresh().await;
    let client = connect(&server.address()).await;
    let queue = Queue::new(&client, "/queues/jobs");
    assert!(queue.is_empty().await.unwrap());
    assert_eq!(queue.poll().await.unwrap(), None);
    for i in 0..5 {
        queue.put(format!("job-{i}").as_bytes()).await.unwrap();
    }
    assert_eq!(queue.len().await.unwrap(), 5);
    for i in 0..5 {
        assert_eq!(queue.take().await.unwrap(), format!("job-{i}").into_bytes());
    }
    assert_eq!(queue.take_for(Duration::from_millis(100)).await.unwrap(), None);

    // A waiting consumer is woken by a put.
    let waiting = tokio::spawn({
        let queue = queue.clone();
        async move { queue.take().await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    queue.put(b"late").await.unwrap();
    assert_eq!(within(10, waiting).await.expect("task").expect("take"), b"late".to_vec());

    // Two producers, three consumers: every item exactly once.
    const PER_PRODUCER: usize = 30;
    let mut producers = Vec::new();
    for p in 0..2 {
        let queue = Queue::new(&connect(&server.address()).await, "/queues/jobs");
        producers.push(tokio::spawn(async move {
            for i in 0..PER_PRODUCER {
                queue.put(format!("{p}:{i}").as_bytes()).await.expect("put");
            }
        }));
    }
    let taken = Arc::new(AtomicUsize::new(0));
    let mut consumers = Vec::new();
    for _ in 0..3 {
        let queue = Queue::new(&connect(&server.address()).await, "/queues/jobs");
        let taken = taken.clone();
        consumers.push(tokio::spawn(async move {
            let mut got = Vec::new();
            while taken.load(Ordering::SeqCst) < 2 * PER_PRODUCER {
                if let Some(item) = queue.take_for(Duration::from_millis(100)).await.expect("take") {
                    taken.fetch_add(1, Ordering::SeqCst);
                    got.push(String::from_utf8(item).expect("text"));
                }
            }
            got
        }));
    }
    for producer in producers {
        within(30, producer).await.expect("producer");
    }
    let mut all = Vec::new();
    for consumer in consumers {
        let got = within(30, consumer).await.expect("consumer");
        // Each consumer sees each producer's items in the order they were put.
        for p in 0..2 {
            let seq: Vec<usize> =
                got.iter().filter_map(|s| s.strip_prefix(&format!("{p}:")).map(|i| i.parse().unwrap())).collect();
            assert!(seq.windows(2).all(|w| w[0] < w[1]), "out of order: {seq:?}");
        }
        all.extend(got);
    }
    let distinct: BTreeSet<&String> = all.iter().collect();
    assert_eq!((all.len(), distinct.len()), (2 * PER_PRODUCER, 2 * PER_PRODUCER));
    assert!(queue.is_empty().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_adds_atomically_under_contention() {
    let server = TestServer::fresh().await;
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let client = connect(&server.address()).await;
        tasks.push(tokio::spawn(async move {
            let counter = Counter::new(&client, "/hits");
            for _ in 0..25 {
                counter.increment().await.expect("increment");
            }
        }));
    }
    for task in tasks {
        within(60, task).await.expect("an incrementing task");
    }
    let client = connect(&server.address()).await;
    let counter = Counter::new(&client, "/hits");
    assert_eq!(counter.get().await.unwrap(), 100);
    assert_eq!(counter.add(-100).await.unwrap(), 0);
    assert_eq!(Counter::new(&client, "/absent").get().await.unwrap(), 0);
    assert_eq!(counter.add(i64::MIN).await.unwrap(), i64::MIN);
    let err = counter.add(-1).await.unwrap_err();
    assert!(matches!(err, RecipeError::Client(ClientError::InvalidArgument(_))), "{err}");
    client.set_data("/hits", b"ten", -1).await.unwrap();
    assert!(matches!(counter.get().await, Err(RecipeError::NotACounter { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ticket_deletes_a_duplicate_of_its_own_node() {
    // A create retried after ConnectionLoss can be applied twice; the copy
    // with the higher number must not stay in the queue behind our own node.
    let server = TestServer::fresh().await;
    let client = connect(&server.address()).await;
    let ticket = ticket::Ticket::take(&client, "/dup", "lock-", b"", &Acl::open_unsafe()).await.unwrap();
    let token = ticket.name.strip_suffix(&ticket.name[ticket.name.len() - 10..]).unwrap().to_string();
    let copy = client.create(&format!("/dup/{token}"), b"", CreateMode::EphemeralSequential, &Acl::open_unsafe()).await;
    assert!(copy.is_ok());
    assert_eq!(queue_of(&client, "/dup", "lock-").await.len(), 2);
    assert!(ticket.wait_first(None).await.unwrap());
    assert_eq!(queue_of(&client, "/dup", "lock-").await, vec![ticket.name.clone()]);
}
