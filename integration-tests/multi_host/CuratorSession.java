// A Curator session that must outlive membership changes (make
// test-multi-host, `membership`), the counterpart of kazoo_session.py:
// connects over TLS (the ZooKeeper client's Netty socket, a PEM trust store)
// to the hosts given, creates an ephemeral node, then writes and reads it
// through Curator's retry every 100 ms until its stdin closes. (Curator's
// ensemble tracking reads /zookeeper/config, whose lines name no plain client
// port here, so it keeps to the hosts given, as with ZooKeeper.) At the end it
// checks the session is the one it started with and its ephemeral node is
// still there, and prints one line:
//
//     OK <session id> <operations> <disconnections>
//     FAIL <why>
//
// A LOST connection state (session expired) or any error Curator's retry
// does not repeat is a failure. Bounded: 10 minutes at most.
//
// Usage: java CuratorSession HOSTS CA_PEM LABEL

import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.state.ConnectionState;
import org.apache.curator.retry.RetryForever;
import org.apache.zookeeper.CreateMode;
import org.apache.zookeeper.client.ZKClientConfig;

public class CuratorSession {
    public static void main(String[] args) throws Exception {
        String hosts = args[0], ca = args[1], label = args[2];
        ZKClientConfig tls = new ZKClientConfig();
        tls.setProperty("zookeeper.client.secure", "true");
        tls.setProperty("zookeeper.clientCnxnSocket", "org.apache.zookeeper.ClientCnxnSocketNetty");
        tls.setProperty("zookeeper.ssl.trustStore.location", ca);
        tls.setProperty("zookeeper.ssl.trustStore.type", "PEM");
        List<ConnectionState> states = new CopyOnWriteArrayList<>();
        CuratorFramework client = CuratorFrameworkFactory.builder()
            .connectString(hosts)
            .sessionTimeoutMs(15000)
            .connectionTimeoutMs(15000)
            .retryPolicy(new RetryForever(100))
            .zkClientConfig(tls)
            .build();
        client.getConnectionStateListenable().addListener((c, state) -> states.add(state));
        client.start();
        try {
            if (!client.blockUntilConnected(30, TimeUnit.SECONDS)) {
                System.out.println("FAIL not connected within 30 s");
                return;
            }
            long session = client.getZookeeperClient().getZooKeeper().getSessionId();
            String ephemeral = "/mh/" + label + "-ephemeral";
            client.create().creatingParentsIfNeeded().withMode(CreateMode.EPHEMERAL).forPath(ephemeral, "held".getBytes());
            System.out.println("READY");
            System.out.flush();
            Thread stdin = new Thread(() -> {
                try {
                    while (System.in.read() >= 0) {
                    }
                } catch (Exception ignored) {
                    // a closed stdin ends the loop either way
                }
            });
            stdin.setDaemon(true);
            stdin.start();
            long started = System.nanoTime();
            int ops = 0;
            while (stdin.isAlive() && System.nanoTime() - started < TimeUnit.MINUTES.toNanos(10)) {
                byte[] value = Integer.toString(ops).getBytes(StandardCharsets.UTF_8);
                client.setData().forPath(ephemeral, value);
                byte[] read = client.getData().forPath(ephemeral);
                if (!java.util.Arrays.equals(read, value)) {
                    throw new IllegalStateException("read " + new String(read, StandardCharsets.UTF_8) + " after writing " + ops);
                }
                ops++;
                Thread.sleep(100);
            }
            if (states.contains(ConnectionState.LOST)) {
                throw new IllegalStateException("the session was lost (expired): " + states);
            }
            long now = client.getZookeeperClient().getZooKeeper().getSessionId();
            if (now != session) {
                throw new IllegalStateException(String.format("the session changed from %x to %x", session, now));
            }
            if (client.checkExists().forPath(ephemeral) == null) {
                throw new IllegalStateException("the ephemeral node is gone");
            }
            long drops = states.stream().filter(s -> s == ConnectionState.SUSPENDED).count();
            System.out.printf("OK %x %d %d%n", session, ops, drops);
        } catch (Exception e) {
            // reported, not thrown: the test reads this line
            System.out.println("FAIL " + e.getClass().getSimpleName() + ": " + e.getMessage() + " (states " + states + ")");
        } finally {
            System.out.flush();
            client.close();
        }
    }
}
