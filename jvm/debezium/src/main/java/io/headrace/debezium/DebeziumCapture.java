package io.headrace.debezium;

import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.format.Json;
import java.util.Properties;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

/** Runs Debezium's PostgreSQL connector in its embedded engine and prints each change
 *  event as one line: topic TAB key TAB value (JSON, no schemas). Runs until stdin closes.
 *  Arguments: host port user dbname topic-prefix table-include-list slot-and-publication,
 *  then any number of name=value connector properties (e.g. decimal.handling.mode=string,
 *  time.precision.mode=connect; value.converter.schemas.enable=true prints the JSON
 *  converter's schema with each value). */
public class DebeziumCapture {
    public static void main(String[] args) throws Exception {
        Properties p = new Properties();
        p.setProperty("name", "headrace-compare");
        p.setProperty("connector.class", "io.debezium.connector.postgresql.PostgresConnector");
        p.setProperty("offset.storage", "org.apache.kafka.connect.storage.MemoryOffsetBackingStore");
        p.setProperty("offset.flush.interval.ms", "1000");
        p.setProperty("database.hostname", args[0]);
        p.setProperty("database.port", args[1]);
        p.setProperty("database.user", args[2]);
        p.setProperty("database.password", "");
        p.setProperty("database.dbname", args[3]);
        p.setProperty("topic.prefix", args[4]);
        p.setProperty("table.include.list", args[5]);
        p.setProperty("slot.name", args[6]);
        p.setProperty("publication.name", args[6]);
        p.setProperty("plugin.name", "pgoutput");
        p.setProperty("publication.autocreate.mode", "filtered");
        p.setProperty("snapshot.mode", "initial");
        p.setProperty("converter.schemas.enable", "false");
        p.setProperty("key.converter.schemas.enable", "false");
        p.setProperty("value.converter.schemas.enable", "false");
        for (int i = 7; i < args.length; i++) {
            int eq = args[i].indexOf('=');
            p.setProperty(args[i].substring(0, eq), args[i].substring(eq + 1));
        }
        DebeziumEngine<ChangeEvent<String, String>> engine = DebeziumEngine.create(Json.class)
                .using(p)
                .notifying(r -> {
                    synchronized (System.out) {
                        System.out.println(r.destination() + "\t" + r.key() + "\t" + r.value());
                        System.out.flush();
                    }
                })
                .build();
        ExecutorService executor = Executors.newSingleThreadExecutor();
        executor.execute(engine);
        System.err.println("debezium started");
        while (System.in.read() != -1) {
            // the parent closes stdin to stop us
        }
        engine.close();
        executor.shutdown();
        executor.awaitTermination(10, TimeUnit.SECONDS);
    }
}
