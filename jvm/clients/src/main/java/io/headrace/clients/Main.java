package io.headrace.clients;

/** Entry point of the Java client scenario driver: {@code java -cp lib/clients/* io.headrace.clients.Main SCENARIO ...}. */
public final class Main {
    private Main() {}

    public static void main(String[] args) throws Exception {
        if (args.length == 0) {
            System.err.println("usage: Main SCENARIO [ARGS...]");
            System.exit(2);
        }
        System.err.println("unknown scenario: " + args[0]);
        System.exit(2);
    }
}
