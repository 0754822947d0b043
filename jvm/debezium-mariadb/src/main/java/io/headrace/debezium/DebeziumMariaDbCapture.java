package io.headrace.debezium;

import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.format.Json;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

/** Runs Debezium's MariaDB connector (its MySQL connector refuses MariaDB) in its embedded engine and prints each change event as
 *  one line: topic TAB key TAB value (JSON, no schemas). Runs until stdin closes.
 *  Arguments: host port user database, then one or more captures separated by "--", each
 *  topic-prefix table-include-list server-id followed by any number of name=value
 *  connector properties (e.g. decimal.handling.mode=string, time.precision.mode=connect).
 *  Several captures share this JVM, one engine each. */
public class DebeziumMariaDbCapture {
    public static void main(String[] args) throws Exception {
        List<List<String>> captures = new ArrayList<>();
        List<String> current = new ArrayList<>();
        for (int i = 4; i < args.length; i++) {
            if (args[i].equals("--")) {
                captures.add(current);
                current = new ArrayList<>();
            } else {
                current.add(args[i]);
            }
        }
        captures.add(current);
        List<DebeziumEngine<ChangeEvent<String, String>>> engines = new ArrayList<>();
        ExecutorService executor = Executors.newFixedThreadPool(captures.size());
        for (List<String> capture : captures) {
            DebeziumEngine<ChangeEvent<String, String>> engine = DebeziumEngine.create(Json.class)
                    .using(properties(args, capture))
                    .notifying(r -> {
                        synchronized (System.out) {
                            System.out.println(r.destination() + "\t" + r.key() + "\t" + r.value());
                            System.out.flush();
                        }
                    })
                    .using((success, message, error) -> {
                        if (!success) {
                            System.err.println("debezium failed: " + message);
                            if (error != null) {
                                error.printStackTrace();
                            }
                        }
                    })
                    .build();
            engines.add(engine);
            executor.execute(engine);
        }
        System.err.println("debezium started");
        while (System.in.read() != -1) {
            // the parent closes stdin to stop us
        }
        for (DebeziumEngine<ChangeEvent<String, String>> engine : engines) {
            engine.close();
        }
        executor.shutdown();
        executor.awaitTermination(10, TimeUnit.SECONDS);
    }

    private static Properties properties(String[] args, List<String> capture) {
        Properties p = new Properties();
        p.setProperty("name", "headrace-compare-mariadb-" + capture.get(0));
        p.setProperty("connector.class", "io.debezium.connector.mariadb.MariaDbConnector");
        p.setProperty("offset.storage", "org.apache.kafka.connect.storage.MemoryOffsetBackingStore");
        p.setProperty("offset.flush.interval.ms", "1000");
        p.setProperty("schema.history.internal", "io.debezium.relational.history.MemorySchemaHistory");
        p.setProperty("database.hostname", args[0]);
        p.setProperty("database.port", args[1]);
        p.setProperty("database.user", args[2]);
        p.setProperty("database.password", "");
        p.setProperty("database.include.list", args[3]);
        p.setProperty("topic.prefix", capture.get(0));
        p.setProperty("table.include.list", capture.get(1));
        p.setProperty("database.server.id", capture.get(2));
        p.setProperty("snapshot.mode", "initial");
        p.setProperty("include.schema.changes", "false");
        p.setProperty("converter.schemas.enable", "false");
        p.setProperty("key.converter.schemas.enable", "false");
        p.setProperty("value.converter.schemas.enable", "false");
        for (int i = 3; i < capture.size(); i++) {
            String property = capture.get(i);
            int eq = property.indexOf('=');
            p.setProperty(property.substring(0, eq), property.substring(eq + 1));
        }
        return p;
    }
}
