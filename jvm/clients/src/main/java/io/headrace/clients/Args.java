package io.headrace.clients;

import java.util.HashMap;
import java.util.Map;

/** {@code --name value} options after the scenario name. */
final class Args {
    private final Map<String, String> values = new HashMap<>();

    Args(String[] argv, int from) {
        for (int i = from; i < argv.length; i += 2) {
            if (!argv[i].startsWith("--") || i + 1 >= argv.length) {
                throw new IllegalArgumentException("expected --name value, got " + argv[i]);
            }
            values.put(argv[i].substring(2), argv[i + 1]);
        }
    }

    String get(String name) {
        String v = values.get(name);
        if (v == null) throw new IllegalArgumentException("missing --" + name);
        return v;
    }

    String bootstrap() {
        return get("bootstrap");
    }

    String topic() {
        return get("topic");
    }
}
