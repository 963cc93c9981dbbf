// The two partition-reassignment calls of Kafka's Admin API (KIP-455) that librdkafka, and
// so confluent-kafka-python, does not offer: list the reassignments in progress, and
// start or cancel reassignments. remediation/reassignments.py runs this file with Java's
// single-file source launcher and the kafka-clients jar on the class path.
//
//   java -cp <kafka-clients...> PartitionReassignments.java <client.properties> list
//     prints one line per reassignment in progress:
//     topic <TAB> partition <TAB> replicas <TAB> adding <TAB> removing   (ids comma-separated)
//   java -cp ... PartitionReassignments.java <client.properties> alter  < plan
//     reads lines "topic <TAB> partition <TAB> replicas" ("-" as replicas cancels the
//     partition's reassignment) and prints "ok <TAB> topic <TAB> partition" or
//     "error <TAB> topic <TAB> partition <TAB> message" for each.
// Exit code 0 when every call was answered (per-partition errors are in the output), 2 on
// bad usage or input, 1 when the cluster could not be reached.

import java.io.BufferedReader;
import java.io.FileInputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewPartitionReassignment;
import org.apache.kafka.clients.admin.PartitionReassignment;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.TopicPartition;

public class PartitionReassignments {
    private static final long TIMEOUT_S = 60;

    public static void main(String[] args) throws Exception {
        if (args.length != 2 || !(args[1].equals("list") || args[1].equals("alter"))) {
            System.err.println("usage: PartitionReassignments <client.properties> list|alter");
            System.exit(2);
        }
        Properties props = new Properties();
        try (FileInputStream in = new FileInputStream(args[0])) {
            props.load(in);
        }
        Map<TopicPartition, Optional<NewPartitionReassignment>> plan = null;
        if (args[1].equals("alter")) {
            plan = readPlan();
            if (plan == null) {
                System.exit(2);
            }
        }
        try (Admin admin = Admin.create(props)) {
            if (plan == null) {
                list(admin);
            } else {
                alter(admin, plan);
            }
        } catch (ExecutionException | java.util.concurrent.TimeoutException e) {
            Throwable cause = e.getCause() != null ? e.getCause() : e;
            System.err.println(cause.getClass().getSimpleName() + ": " + cause.getMessage());
            System.exit(1);
        }
    }

    private static String ids(List<Integer> replicas) {
        return replicas.stream().map(String::valueOf).collect(Collectors.joining(","));
    }

    private static void list(Admin admin) throws Exception {
        Map<TopicPartition, PartitionReassignment> all =
            admin.listPartitionReassignments().reassignments().get(TIMEOUT_S, TimeUnit.SECONDS);
        for (Map.Entry<TopicPartition, PartitionReassignment> e : all.entrySet()) {
            PartitionReassignment r = e.getValue();
            System.out.println(e.getKey().topic() + "\t" + e.getKey().partition() + "\t"
                + ids(r.replicas()) + "\t" + ids(r.addingReplicas()) + "\t"
                + ids(r.removingReplicas()));
        }
    }

    private static Map<TopicPartition, Optional<NewPartitionReassignment>> readPlan()
            throws Exception {
        Map<TopicPartition, Optional<NewPartitionReassignment>> plan = new LinkedHashMap<>();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            String[] f = line.split("\t");
            if (f.length != 3) {
                System.err.println("bad plan line (want topic TAB partition TAB replicas): " + line);
                return null;
            }
            TopicPartition tp = new TopicPartition(f[0], Integer.parseInt(f[1]));
            if (f[2].equals("-")) {
                plan.put(tp, Optional.empty());
            } else {
                List<Integer> replicas = new ArrayList<>();
                for (String id : f[2].split(",")) {
                    replicas.add(Integer.parseInt(id.trim()));
                }
                plan.put(tp, Optional.of(new NewPartitionReassignment(replicas)));
            }
        }
        return plan;
    }

    private static void alter(Admin admin, Map<TopicPartition, Optional<NewPartitionReassignment>> plan)
            throws Exception {
        Map<TopicPartition, KafkaFuture<Void>> results =
            admin.alterPartitionReassignments(plan).values();
        for (Map.Entry<TopicPartition, KafkaFuture<Void>> e : results.entrySet()) {
            TopicPartition tp = e.getKey();
            try {
                e.getValue().get(TIMEOUT_S, TimeUnit.SECONDS);
                System.out.println("ok\t" + tp.topic() + "\t" + tp.partition());
            } catch (ExecutionException ex) {
                Throwable c = ex.getCause() != null ? ex.getCause() : ex;
                String msg = (c.getClass().getSimpleName() + ": " + c.getMessage())
                    .replace('\t', ' ').replace('\n', ' ');
                System.out.println("error\t" + tp.topic() + "\t" + tp.partition() + "\t" + msg);
            }
        }
    }
}
