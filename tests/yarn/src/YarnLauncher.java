// A real YARN ResourceManager for ds-reaper's tests (SPEC §17): starts a
// MiniYARNCluster (one RM) on 127.0.0.1 and a NodeManager in a JVM of its own
// ("nm" below), prints "rm <webapp url>" once the NM has registered (its log
// lines go to stdout too: read only the lines this protocol starts), then
// reads commands from stdin, one per line:
//   submit <name>   submits an application whose master ("am" below) registers
//                   and then only heartbeats: RUNNING until killed (without a
//                   NodeManager, as in the HA mode, an AM that only sleeps:
//                   ACCEPTED until killed); prints "app <id>"
//   submit-as <user> <name>
//                   the same, submitted as <user> (simple auth: the RM takes
//                   the caller's name, so the application's user is <user>)
//   state <id>      prints "state <id> <YARN state>"
//   quit            stops the cluster
// With the arguments "ha <rm-id> <conf file>" it starts instead one
// ResourceManager of an HA pair (no NodeManager): the conf file's key=value
// lines name both RMs' addresses, the ZooKeeper its elector uses and the
// cluster id; it prints "rm <its webapp url> <ACTIVE|STANDBY>" once it has
// taken a side, and serves the same commands (its YarnClient fails over to
// whichever RM is active). Two JVMs, one RM each: in one JVM the RMs' web
// apps would share one static filter. "nm <tracker> <scheduler> <dir>" and
// "am <scheduler>" are the NodeManager and the application master, started by
// the launcher and the NodeManager.
// Run by tests/yarn/launch.sh; its jars come from Maven Central into a cache
// outside the repository.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.util.Collections;
import org.apache.hadoop.yarn.api.records.ApplicationId;
import org.apache.hadoop.yarn.api.records.ApplicationSubmissionContext;
import org.apache.hadoop.yarn.api.records.ContainerLaunchContext;
import org.apache.hadoop.yarn.api.records.Resource;
import org.apache.hadoop.yarn.client.api.YarnClient;
import org.apache.hadoop.yarn.client.api.YarnClientApplication;
import org.apache.hadoop.yarn.conf.YarnConfiguration;
import org.apache.hadoop.yarn.server.MiniYARNCluster;
import org.apache.hadoop.yarn.server.resourcemanager.ResourceManager;

public class YarnLauncher {
    public static void main(String[] args) {
        try {
            if (args.length == 3 && args[0].equals("ha")) {
                runHa(args[1], args[2]);
            } else if (args.length == 4 && args[0].equals("nm")) {
                runNm(args[1], args[2], args[3]);
            } else if (args.length == 2 && args[0].equals("am")) {
                runAm(args[1]);
            } else {
                run();
            }
        } catch (Throwable e) {
            // a failed start leaves non-daemon threads behind: end them all
            e.printStackTrace();
            System.out.println("error " + e.toString().replace('\n', ' '));
            System.exit(1);
        }
    }

    static void runHa(String id, String confFile) throws Exception {
        YarnConfiguration conf = new YarnConfiguration();
        conf.set("yarn.resourcemanager.scheduler.class",
                "org.apache.hadoop.yarn.server.resourcemanager.scheduler.fifo.FifoScheduler");
        conf.setInt("yarn.scheduler.minimum-allocation-mb", 64);
        conf.setBoolean("yarn.resourcemanager.recovery.enabled", false);
        for (String l : java.nio.file.Files.readAllLines(java.nio.file.Paths.get(confFile))) {
            int eq = l.indexOf('=');
            if (eq > 0) {
                conf.set(l.substring(0, eq).trim(), l.substring(eq + 1).trim());
            }
        }
        conf.set("yarn.resourcemanager.ha.id", id);
        ResourceManager rm = new ResourceManager();
        rm.init(conf);
        rm.start();
        String state = "";
        for (int i = 0; i < 600; i++) {
            state = String.valueOf(rm.getRMContext().getHAServiceState()).toUpperCase();
            if (state.equals("ACTIVE") || state.equals("STANDBY")) {
                break;
            }
            Thread.sleep(100);
        }
        YarnClient client = YarnClient.createYarnClient();
        client.init(new YarnConfiguration(conf));
        client.start();
        System.out.println("rm http://" + conf.get("yarn.resourcemanager.webapp.address." + id) + " " + state);
        System.out.flush();
        serve(client, Collections.singletonList("sleep 3600"));
        client.stop();
        rm.stop();
        System.exit(0);
    }

    static void run() throws Exception {
        YarnConfiguration conf = new YarnConfiguration();
        conf.set("yarn.resourcemanager.hostname", "127.0.0.1");
        conf.set("yarn.nodemanager.hostname", "127.0.0.1");
        conf.set("yarn.resourcemanager.scheduler.class",
                "org.apache.hadoop.yarn.server.resourcemanager.scheduler.fifo.FifoScheduler");
        conf.setInt("yarn.scheduler.minimum-allocation-mb", 64);
        conf.setInt("yarn.nodemanager.resource.memory-mb", 2048);
        conf.setBoolean("yarn.nodemanager.vmem-check-enabled", false);
        conf.setBoolean("yarn.nodemanager.pmem-check-enabled", false);
        conf.set("yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage", "99.9");
        // The NodeManager runs in a JVM of its own (in this one its web app
        // would take over the RM's: one static GuiceFilter); with it the
        // application masters run and register, so applications are RUNNING.
        MiniYARNCluster cluster = new MiniYARNCluster("ds-reaper", 0, 1, 1);
        cluster.init(conf);
        cluster.start();
        YarnConfiguration live = new YarnConfiguration(cluster.getConfig());
        // the RM's own web app (the shared configuration's address may be another server's)
        String web = live.get(YarnConfiguration.RM_WEBAPP_ADDRESS);
        String tracker = live.get(YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS);
        String scheduler = live.get(YarnConfiguration.RM_SCHEDULER_ADDRESS);
        YarnClient client = YarnClient.createYarnClient();
        client.init(live);
        client.start();
        String java = System.getProperty("java.home") + "/bin/java";
        String cp = System.getProperty("java.class.path");
        String work = new java.io.File(".").getAbsolutePath();
        ProcessBuilder pb = new ProcessBuilder(java, "-Xmx256m", "-Djava.net.preferIPv4Stack=true",
                "-cp", cp, "YarnLauncher", "nm", tracker, scheduler, work);
        for (String p : new String[] {"java.lang", "java.lang.reflect", "java.util", "java.util.concurrent",
                "java.io", "java.net", "java.nio", "sun.nio.ch"}) {
            pb.command().add(1, "--add-opens=java.base/" + p + "=ALL-UNNAMED");
        }
        pb.redirectOutput(ProcessBuilder.Redirect.INHERIT);
        pb.redirectError(ProcessBuilder.Redirect.INHERIT);
        // its stdin is ours to hold: it ends when this JVM does, however
        Process nm = pb.start();
        long deadline = System.currentTimeMillis() + 180_000;
        while (client.getNodeReports(org.apache.hadoop.yarn.api.records.NodeState.RUNNING).isEmpty()) {
            if (!nm.isAlive() || System.currentTimeMillis() > deadline) {
                throw new IllegalStateException("the NodeManager did not register");
            }
            Thread.sleep(200);
        }
        System.out.println("rm http://" + web);
        System.out.flush();
        // the application master: this class, registering with the scheduler
        String am = java + " -Xmx128m -cp " + cp + " YarnLauncher am " + scheduler
                + " 1><LOG_DIR>/stdout 2><LOG_DIR>/stderr";
        serve(client, Collections.singletonList(am));
        client.stop();
        nm.destroy();
        cluster.stop();
        System.exit(0);
    }

    /** A NodeManager for the RM at tracker/scheduler, its dirs under work; it
     *  ends when its stdin does (the launcher that started it is gone). */
    static void runNm(String tracker, String scheduler, String work) throws Exception {
        YarnConfiguration conf = new YarnConfiguration();
        conf.set(YarnConfiguration.RM_RESOURCE_TRACKER_ADDRESS, tracker);
        conf.set(YarnConfiguration.RM_SCHEDULER_ADDRESS, scheduler);
        conf.set("yarn.nodemanager.hostname", "127.0.0.1");
        conf.set("yarn.nodemanager.address", "127.0.0.1:0");
        conf.set("yarn.nodemanager.localizer.address", "127.0.0.1:0");
        conf.set("yarn.nodemanager.webapp.address", "127.0.0.1:0");
        conf.set("yarn.nodemanager.local-dirs", work + "/nm-local");
        conf.set("yarn.nodemanager.log-dirs", work + "/nm-logs");
        conf.setInt("yarn.nodemanager.resource.memory-mb", 2048);
        conf.setBoolean("yarn.nodemanager.vmem-check-enabled", false);
        conf.setBoolean("yarn.nodemanager.pmem-check-enabled", false);
        conf.set("yarn.nodemanager.disk-health-checker.max-disk-utilization-per-disk-percentage", "99.9");
        org.apache.hadoop.yarn.server.nodemanager.NodeManager nm =
                new org.apache.hadoop.yarn.server.nodemanager.NodeManager();
        nm.init(conf);
        nm.start();
        while (System.in.read() != -1) {
            // nothing is sent: only the end matters
        }
        nm.stop();
        System.exit(0);
    }

    /** An application master that registers and heartbeats until killed. */
    static void runAm(String scheduler) throws Exception {
        YarnConfiguration conf = new YarnConfiguration();
        conf.set(YarnConfiguration.RM_SCHEDULER_ADDRESS, scheduler);
        org.apache.hadoop.yarn.client.api.AMRMClient<org.apache.hadoop.yarn.client.api.AMRMClient.ContainerRequest> amrm =
                org.apache.hadoop.yarn.client.api.AMRMClient.createAMRMClient();
        amrm.init(conf);
        amrm.start();
        amrm.registerApplicationMaster("127.0.0.1", 0, "");
        while (true) {
            amrm.allocate(0f);
            Thread.sleep(1000);
        }
    }

    static ApplicationId submit(YarnClient client, String name, java.util.List<String> amCommand) throws Exception {
        YarnClientApplication app = client.createApplication();
        ApplicationSubmissionContext ctx = app.getApplicationSubmissionContext();
        ctx.setApplicationName(name);
        ctx.setApplicationType("SPARK");
        ctx.setMaxAppAttempts(1);
        ContainerLaunchContext am = ContainerLaunchContext.newInstance(
                Collections.emptyMap(), Collections.emptyMap(),
                amCommand, null, null, null);
        ctx.setAMContainerSpec(am);
        ctx.setResource(Resource.newInstance(128, 1));
        return client.submitApplication(ctx);
    }

    /** The stdin commands, until "quit" or the end of stdin. */
    static void serve(YarnClient client, java.util.List<String> amCommand) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String line;
        while ((line = in.readLine()) != null) {
            String[] w = line.trim().split("\\s+");
            try {
                if (w[0].equals("submit")) {
                    System.out.println("app " + submit(client, w.length > 1 ? w[1] : "ds-reaper-test", amCommand));
                } else if (w[0].equals("submit-as") && w.length > 2) {
                    // a client of the user's own: an RPC proxy keeps the user it was made by
                    String name = w[2];
                    ApplicationId id = org.apache.hadoop.security.UserGroupInformation.createRemoteUser(w[1])
                            .doAs((java.security.PrivilegedExceptionAction<ApplicationId>) () -> {
                                YarnClient as = YarnClient.createYarnClient();
                                as.init(new YarnConfiguration(client.getConfig()));
                                as.start();
                                try {
                                    return submit(as, name, amCommand);
                                } finally {
                                    as.stop();
                                }
                            });
                    System.out.println("app " + id);
                } else if (w[0].equals("state")) {
                    ApplicationId id = ApplicationId.fromString(w[1]);
                    System.out.println("state " + id + " " + client.getApplicationReport(id).getYarnApplicationState());
                } else if (w[0].equals("quit")) {
                    break;
                } else {
                    System.out.println("error unknown command " + w[0]);
                }
            } catch (Exception e) {
                System.out.println("error " + e.toString().replace('\n', ' '));
            }
            System.out.flush();
        }
    }
}
