//! The configuration file's checks, key by key.

use super::*;

const THREE: &str = r#"
tick_ms = 50
data_dir = "run/zk{id}"
[[server]]
id = 1
peer_addr = "127.0.0.1:2881"
grpc_addr = "127.0.0.1:3181"
client_addr = "127.0.0.1:2181"
[[server]]
id = 2
peer_addr = "127.0.0.1:2882"
grpc_addr = "127.0.0.1:3182"
[[server]]
id = 3
peer_addr = "127.0.0.1:2883"
grpc_addr = "127.0.0.1:3183"
"#;

fn err(text: &str, id: Option<ServerId>) -> String {
    ServerConfig::parse(text, id).unwrap_err().to_string()
}

#[test]
fn parses_an_ensemble_and_picks_the_member() {
    let c = ServerConfig::parse(THREE, Some(2)).unwrap();
    assert_eq!(c.members.len(), 3);
    assert_eq!(c.me().data_dir, PathBuf::from("run/zk2"));
    assert_eq!(c.me().client_addr, None);
    assert_eq!(c.min_session_timeout_ms, 1000);
}

#[test]
fn errors_name_the_key() {
    assert!(err(THREE, None).contains("--id"));
    assert!(err(THREE, Some(9)).contains("no [[server]] with id 9"));
    assert!(err(&THREE.replace("127.0.0.1:2882", "nowhere"), Some(1)).contains("server[id=2].peer_addr"));
    assert!(err(&THREE.replace("tick_ms = 50", "tick_ms = 0"), Some(1)).contains("`tick_ms`"));
    assert!(err(&THREE.replace("tick_ms = 50", "tick_ms = \"fast\""), Some(1)).contains("tick_ms"));
    assert!(err(&THREE.replace("tick_ms = 50", "tik_ms = 50"), Some(1)).contains("tik_ms"));
    assert!(err(&THREE.replace("id = 3", "id = 2"), Some(1)).contains("appears twice"));
    assert!(err(&THREE.replace("id = 3", "id = 300"), Some(1)).contains("server[2].id"));
    assert!(err(&THREE.replace("127.0.0.1:3183", "127.0.0.1:3182"), Some(1)).contains("also used"));
    let minmax = THREE.replace("tick_ms = 50", "min_session_timeout_ms = 5000\nmax_session_timeout_ms = 4000");
    assert!(err(&minmax, Some(1)).contains("max_session_timeout_ms"));
    let words = THREE.replace("tick_ms = 50", "four_letter_words = [\"kill\"]");
    assert!(err(&words, Some(1)).contains("four_letter_words[0]"));
    let resident = THREE.replace("tick_ms = 50", "resident_log_entries = 0");
    assert!(err(&resident, Some(1)).contains("`resident_log_entries`"));
    let c = ServerConfig::parse(&THREE.replace("tick_ms = 50", "resident_log_entries = 20"), Some(1)).unwrap();
    assert_eq!(c.resident_log_entries, 20);
}

#[test]
fn the_admin_port_stays_on_loopback_and_takes_a_token() {
    let remote = THREE.replace("client_addr = \"127.0.0.1:2181\"", "admin_addr = \"0.0.0.0:4181\"");
    assert!(err(&remote, Some(1)).contains("server[id=1].admin_addr"));
    let allowed = format!("admin_allow_remote = true\nadmin_token = \"s3cret\"\n{remote}");
    let c = ServerConfig::parse(&allowed, Some(1)).unwrap();
    assert_eq!(c.admin_token.as_deref(), Some("s3cret"));
    assert!(err(&format!("admin_token = \"two words\"\n{THREE}"), Some(1)).contains("`admin_token`"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("token");
    std::fs::write(&file, "from-a-file\n").unwrap();
    let text = format!("admin_token_file = {:?}\n{THREE}", file.display().to_string());
    assert_eq!(ServerConfig::parse(&text, Some(1)).unwrap().admin_token.as_deref(), Some("from-a-file"));
    let missing = format!("admin_token_file = \"/nonexistent/token\"\n{THREE}");
    assert!(err(&missing, Some(1)).contains("`admin_token_file`"));
    assert!(err(&format!("log_format = \"xml\"\n{THREE}"), Some(1)).contains("`log_format`"));
    let json = ServerConfig::parse(&format!("log_format = \"json\"\n{THREE}"), Some(1)).unwrap();
    assert_eq!(json.log_format, LogFormat::Json);
}

#[test]
fn client_limits_have_zookeepers_defaults_and_are_checked() {
    let c = ServerConfig::parse(THREE, Some(1)).unwrap();
    assert_eq!((c.limits.max_frame_bytes, c.limits.max_connections_per_address), (1_048_575, 60));
    assert!(err(&format!("max_frame_bytes = 10\n{THREE}"), Some(1)).contains("`max_frame_bytes`"));
    assert!(err(&format!("connect_timeout_ms = 0\n{THREE}"), Some(1)).contains("`connect_timeout_ms`"));
    assert!(err(&format!("super_digest = \"nocolon\"\n{THREE}"), Some(1)).contains("`super_digest`"));
    let text = format!(
        "super_digest = \"super:D/InIHSb7yEEbrWz8b9l71RjZJU=\"\nmax_client_connections_per_address = 0\n{THREE}"
    );
    let c = ServerConfig::parse(&text, Some(1)).unwrap();
    assert_eq!(c.limits.max_connections_per_address, 0);
    assert!(c.super_digest.is_some());
}

#[test]
fn an_x509_superuser_needs_client_certificates_to_come_from() {
    let tls = "\n[tls]\ncert_file = \"c.pem\"\nkey_file = \"k.pem\"\nca_file = \"ca.pem\"\n";
    let su = "x509_superuser = \"CN=admin,O=ops\"\n";
    let c = ServerConfig::parse(&format!("{su}{THREE}{tls}client_auth = true\n"), Some(1)).unwrap();
    assert_eq!(c.x509_superuser.as_deref(), Some("CN=admin,O=ops"));
    assert!(err(&format!("{su}{THREE}"), Some(1)).contains("client_auth = true"));
    assert!(err(&format!("{su}{THREE}{tls}"), Some(1)).contains("`x509_superuser`"));
    let blank = format!("x509_superuser = \" \"\n{THREE}{tls}client_auth = true\n");
    assert!(err(&blank, Some(1)).contains("empty subject"));
}

/// One file for a StatefulSet: members by DNS name, every listener on
/// 0.0.0.0 but the admin API, which stays on each pod's loopback.
const PODS: &str = r#"
data_dir = "/data"
bind_host = "0.0.0.0"
[[server]]
id = 1
peer_addr = "zk-0.zk-hs:2888"
grpc_addr = "zk-0.zk-hs:3181"
client_addr = "zk-0.zk-hs:2181"
admin_addr = "127.0.0.1:4181"
[[server]]
id = 2
peer_addr = "zk-1.zk-hs:2888"
grpc_addr = "zk-1.zk-hs:3181"
client_addr = "zk-1.zk-hs:2181"
admin_addr = "127.0.0.1:4181"
grpc_bind = "10.0.0.7:3999"
[[server]]
id = 3
peer_addr = "zk-2.zk-hs:2888"
grpc_addr = "zk-2.zk-hs:3181"
admin_addr = "127.0.0.1:4181"
"#;

fn sources(id: Option<ServerId>, hostname: Option<&str>, env: &[(&str, &str)]) -> Sources {
    let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    Sources { id, hostname: hostname.map(str::to_string), env }
}

#[test]
fn host_names_are_advertised_and_bind_host_is_where_listeners_bind() {
    let c = ServerConfig::parse(PODS, Some(2)).unwrap();
    let me = c.me();
    assert_eq!(me.peer_addr.to_string(), "zk-1.zk-hs:2888");
    assert_eq!(me.bind.peer.to_string(), "0.0.0.0:2888");
    assert_eq!(me.bind.grpc.to_string(), "10.0.0.7:3999", "an explicit *_bind wins");
    assert_eq!(me.bind.client.as_ref().map(ToString::to_string).as_deref(), Some("0.0.0.0:2181"));
    assert_eq!(me.bind.admin.as_ref().map(ToString::to_string).as_deref(), Some("127.0.0.1:4181"));
    let three = ServerConfig::parse(PODS, Some(3)).unwrap();
    assert_eq!(three.me().bind.client, None);
    // Without bind_host, a listener binds where it is reached.
    let local = ServerConfig::parse(THREE, Some(1)).unwrap();
    assert_eq!(local.me().bind.peer, local.me().peer_addr);
}

#[test]
fn members_on_one_machine_must_not_share_a_port_but_members_apart_may() {
    // Each pod keeps its admin API on its own 127.0.0.1:4181.
    assert!(ServerConfig::parse(PODS, Some(1)).is_ok());
    let clash = PODS.replace("zk-1.zk-hs:2888", "zk-0.zk-hs:2888");
    assert!(err(&clash, Some(1)).contains("also used by server 1"));
    // Loopback spelled two ways is still one machine.
    let spelled = THREE.replace("127.0.0.1:2882", "localhost:2882").replace("127.0.0.1:3182", "127.0.0.1:3181");
    assert!(err(&spelled, Some(1)).contains("also used by server 1"), "{}", err(&spelled, Some(1)));
    let bad_bind = PODS.replace("grpc_bind = \"10.0.0.7:3999\"", "client_bind = \"nowhere\"");
    assert!(err(&bad_bind, Some(1)).contains("server[id=2].client_bind"));
    let orphan = PODS.replace("grpc_bind = \"10.0.0.7:3999\"", "metrics_bind = \"0.0.0.0:9181\"");
    assert!(err(&orphan, Some(1)).contains("set only with metrics_addr"));
    let remote_admin = PODS.replace("grpc_bind = \"10.0.0.7:3999\"", "admin_bind = \"0.0.0.0:4181\"");
    assert!(err(&remote_admin, Some(2)).contains("server[id=2].admin_bind"));
    // Only what this member listens on: member 1 starts on the same file.
    assert!(ServerConfig::parse(&remote_admin, Some(1)).is_ok(), "member 2's admin API is member 2's business");
}

#[test]
fn the_member_id_comes_from_the_flag_the_only_member_or_the_host_name() {
    let pick = |id, host: Option<&str>| ServerConfig::parse_with(PODS, &sources(id, host, &[])).map(|c| c.id);
    assert_eq!(pick(None, Some("zk-2")).unwrap(), 3);
    assert_eq!(pick(None, Some("zk-0.zk-hs.default.svc.cluster.local")).unwrap(), 1);
    assert_eq!(pick(Some(2), Some("zk-0")).unwrap(), 2, "--id wins over the host name");
    let wrong = pick(None, Some("zk-7")).unwrap_err().to_string();
    assert!(wrong.contains("\"zk-7\" names member 8") && wrong.contains("1, 2, 3"), "{wrong}");
    let nameless = pick(None, Some("laptop")).unwrap_err().to_string();
    assert!(nameless.contains("--id or ZABKEEPER_ID"), "{nameless}");
}

#[test]
fn environment_overrides_win_over_the_file_and_errors_name_them() {
    let env = [("ZABKEEPER_TICK_MS", "20"), ("ZABKEEPER_SERVER_3_CLIENT_ADDR", "zk-2.zk-hs:2181")];
    let c = ServerConfig::parse_with(PODS, &sources(Some(3), None, &env)).unwrap();
    assert_eq!(c.tick_ms, 20);
    assert_eq!(c.me().client_addr.as_ref().map(ToString::to_string).as_deref(), Some("zk-2.zk-hs:2181"));
    let typo = ServerConfig::parse_with(PODS, &sources(Some(1), None, &[("ZABKEEPER_TIK_MS", "20")]));
    let message = typo.unwrap_err().to_string();
    assert!(message.contains("tik_ms") && message.contains("ZABKEEPER_TIK_MS"), "{message}");
    let bad = ServerConfig::parse_with(PODS, &sources(Some(1), None, &[("ZABKEEPER_TICK_MS", "0")]));
    assert!(bad.unwrap_err().to_string().contains("`tick_ms`"));
}

#[test]
fn single_member_needs_no_id() {
    let single = "data_dir = \"d\"\n[[server]]\nid = 1\npeer_addr = \"127.0.0.1:1\"\ngrpc_addr = \"127.0.0.1:2\"\n";
    let c = ServerConfig::parse(single, None).unwrap();
    assert!(c.standalone());
}

#[test]
fn reconfig_is_off_unless_enabled() {
    assert!(!ServerConfig::parse(THREE, Some(1)).unwrap().reconfig_enabled);
    let on = ServerConfig::parse(&format!("reconfig_enabled = true\n{THREE}"), Some(1)).unwrap();
    assert!(on.reconfig_enabled);
}

#[test]
fn only_this_members_data_dir_is_needed() {
    // Another member's table, as a rewrite after a reconfiguration adds it,
    // names no data directory: none of this member's business.
    let text = "[[server]]\nid = 1\npeer_addr = \"127.0.0.1:1\"\ngrpc_addr = \"127.0.0.1:2\"\ndata_dir = \"d1\"\n\
                [[server]]\nid = 2\npeer_addr = \"127.0.0.1:3\"\ngrpc_addr = \"127.0.0.1:4\"\n";
    assert_eq!(ServerConfig::parse(text, Some(1)).unwrap().me().data_dir, PathBuf::from("d1"));
    let two = ServerConfig::parse(text, Some(2)).unwrap_err().to_string();
    assert!(two.contains("server[id=2].data_dir") && two.contains("no data_dir"), "{two}");
}

#[test]
fn worker_threads_are_unset_unless_given_and_are_bounded() {
    assert_eq!(ServerConfig::parse(THREE, Some(1)).unwrap().worker_threads, None);
    let one = ServerConfig::parse(&THREE.replace("tick_ms = 50", "worker_threads = 1"), Some(1)).unwrap();
    assert_eq!(one.worker_threads, Some(1));
    for bad in ["0", "257", "-1", "\"two\""] {
        let message = err(&THREE.replace("tick_ms = 50", &format!("worker_threads = {bad}")), Some(1));
        assert!(message.contains("worker_threads"), "{bad}: {message}");
    }
    let env = [("ZABKEEPER_WORKER_THREADS", "3")];
    assert_eq!(ServerConfig::parse_with(PODS, &sources(Some(1), None, &env)).unwrap().worker_threads, Some(3));
}

#[test]
fn members_on_one_machine_share_its_cpus_unless_worker_threads_is_set() {
    let local = ServerConfig::parse(THREE, Some(2)).unwrap();
    assert_eq!(local.members_on_this_machine(), 3);
    assert_eq!([1, 2, 3, 8, 64].map(|cpus| local.runtime_workers(cpus)), [1, 1, 1, 2, 21]);
    // One member per pod: each has its host's CPUs.
    let pods = ServerConfig::parse(PODS, Some(1)).unwrap();
    assert_eq!(pods.members_on_this_machine(), 1);
    assert_eq!(pods.runtime_workers(2), 2);
    let set = ServerConfig::parse(&THREE.replace("tick_ms = 50", "worker_threads = 4"), Some(1)).unwrap();
    assert_eq!(set.runtime_workers(2), 4, "the setting wins");
}
