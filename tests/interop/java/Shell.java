// The request loop every long-lived test program shares (tests/interop/java_support.py,
// JavaProcess): one JSON object per line on stdin ({"op": ..., fields}), one JSON answer per line
// on stdout. A subclass registers its ops; an exception becomes {"error": <Java class>,
// "message": ..., "cause": <class of the root cause>} so a test can assert on Kafka's exception
// types (e.g. "UnknownTopicOrPartitionException"). stdin closed = exit 0.
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;

public abstract class Shell {
    public static final ObjectMapper JSON = new ObjectMapper();

    public interface Op {
        Object apply(JsonNode request) throws Exception;
    }

    private final Map<String, Op> ops = new HashMap<>();

    protected void op(String name, Op op) {
        ops.put(name, op);
    }

    protected void close() throws Exception {
    }

    public static ObjectNode obj() {
        return JSON.createObjectNode();
    }

    public static ObjectNode error(Throwable e) {
        Throwable t = e;
        while ((t instanceof ExecutionException || t instanceof CompletionException) && t.getCause() != null) {
            t = t.getCause();
        }
        Throwable root = t;
        while (root.getCause() != null && root.getCause() != root) {
            root = root.getCause();
        }
        ObjectNode out = obj();
        out.put("error", t.getClass().getSimpleName());
        out.put("message", String.valueOf(t.getMessage()));
        out.put("cause", root.getClass().getSimpleName());
        return out;
    }

    public void serve() throws Exception {
        // stdout carries answers only: anything else printing there goes to stderr
        PrintStream answers = new PrintStream(new java.io.FileOutputStream(java.io.FileDescriptor.out), true,
                StandardCharsets.UTF_8);
        System.setOut(System.err);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        try {
            while ((line = in.readLine()) != null) {
                if (line.isBlank()) {
                    continue;
                }
                JsonNode request = JSON.readTree(line);
                String name = request.path("op").asText();
                Object answer;
                Op op = ops.get(name);
                try {
                    if (op == null) {
                        throw new IllegalArgumentException("unknown op " + name);
                    }
                    answer = op.apply(request);
                    if (answer == null) {
                        answer = obj();
                    }
                } catch (Throwable e) {
                    e.printStackTrace(System.err);
                    answer = error(e);
                }
                answers.println(JSON.writeValueAsString(answer));
            }
        } finally {
            close();
        }
    }
}
