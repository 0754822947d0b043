package io.headrace.clients;

import java.util.Map;

/**
 * Entry point of the Java client scenario driver:
 * {@code java -cp lib/clients/* io.headrace.clients.Main SCENARIO --bootstrap HOST:PORT --topic NAME}.
 *
 * <p>Each scenario creates its topics (named from {@code --topic}), runs a fixed workload with
 * the plain kafka-clients API and prints ONE JSON document of what it observed on stdout; the
 * Python tests (tests/compat/test_java_client.py) assert the exact outcome. Logs go to stderr
 * at WARN (the group coordinator's join/sync steps at INFO: a failed group scenario shows
 * them). Exit status 0 on success, 1 if the scenario threw, 2 on a usage error.
 */
public final class Main {
    private Main() {}

    public static void main(String[] argv) throws Exception {
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        System.setProperty("org.slf4j.simpleLogger.logFile", "System.err");
        System.setProperty("org.slf4j.simpleLogger.showDateTime", "true");
        System.setProperty("org.slf4j.simpleLogger.log.org.apache.kafka.clients.consumer.internals", "info");
        if (argv.length == 0) {
            System.err.println("usage: Main SCENARIO --bootstrap HOST:PORT --topic NAME");
            System.exit(2);
        }
        Args args = new Args(argv, 1);
        Map<String, Object> result;
        try {
            result = switch (argv[0]) {
                case "produce" -> ProducerScenarios.produce(args);
                case "transactions" -> TransactionScenarios.transactions(args);
                case "positions" -> ConsumerScenarios.positions(args);
                case "commits" -> ConsumerScenarios.commits(args);
                case "assignors" -> GroupScenarios.assignors(args);
                case "static-membership" -> GroupScenarios.staticMembership(args);
                case "consumer-protocol" -> GroupScenarios.consumerProtocol(args);
                case "admin" -> AdminScenarios.admin(args);
                default -> null;
            };
        } catch (Exception e) {
            e.printStackTrace();
            System.exit(1);
            return;
        }
        if (result == null) {
            System.err.println("unknown scenario: " + argv[0]);
            System.exit(2);
        }
        System.out.println(Json.write(result));
        System.out.flush();
        System.exit(0); // do not wait for lingering client threads
    }
}
