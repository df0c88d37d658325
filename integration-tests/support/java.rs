//! Java clients (Debian's Curator and ZooKeeper jars, `make java-clients`):
//! the classpath they run on and compiling a test's program against it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where Debian puts the jars.
const JAVA_DIR: &str = "/usr/share/java";
/// Curator and the ZooKeeper client, with what they load.
const JARS: [&str; 8] = [
    "curator-framework.jar",
    "curator-client.jar",
    "curator-recipes.jar",
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "guava.jar",
    "slf4j-api.jar",
    "slf4j-nop.jar",
];
/// What the ZooKeeper client's TLS (its Netty socket) loads besides.
pub const NETTY_JARS: [&str; 8] = [
    "netty-buffer.jar",
    "netty-codec.jar",
    "netty-common.jar",
    "netty-handler.jar",
    "netty-resolver.jar",
    "netty-transport.jar",
    "netty-transport-native-epoll.jar",
    "netty-transport-native-unix-common.jar",
];

/// The classpath of Debian's jars plus `extra`, or why it cannot be had.
pub fn classpath(extra: &[&str]) -> Result<String, String> {
    for tool in ["javac", "java"] {
        let found = Command::new(tool).arg("-version").stdout(Stdio::null()).stderr(Stdio::null()).status();
        if !found.is_ok_and(|s| s.success()) {
            return Err(format!("`{tool}` is not installed (make java-clients installs a JDK)"));
        }
    }
    let mut parts = Vec::new();
    for jar in JARS.iter().chain(extra) {
        let path = Path::new(JAVA_DIR).join(jar);
        if !path.exists() {
            return Err(format!("{} is missing (make java-clients installs Debian's Curator)", path.display()));
        }
        parts.push(path.display().to_string());
    }
    Ok(parts.join(":"))
}

/// Compiles `source` (relative to the package's root) into `out`.
pub fn compile(classpath: &str, source: &str, out: &Path) {
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(source);
    let status =
        Command::new("javac").arg("-d").arg(out).arg("-cp").arg(classpath).arg(&source).status().expect("run javac");
    assert!(status.success(), "javac failed on {}", source.display());
}
