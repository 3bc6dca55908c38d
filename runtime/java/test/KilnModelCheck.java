import dev.kiln.KilnException;
import dev.kiln.KilnModel;

/**
 * Drives {@link KilnModel} for kiln's end-to-end test
 * (tests/java_library.rs) and prints one machine-readable line per step.
 *
 * <pre>
 * java -Djava.library.path=DIR_OF_LIBKILN_RUNTIME -cp CLASSES KilnModelCheck \
 *     PACKAGE_DIR DEVICE WORKER_GROUPS COMMAND...
 * </pre>
 *
 * Commands, run in order on one model:
 * <ul>
 * <li>{@code ids:N:1,2,3}: {@code generateIds} of these ids, at most N new:
 *     prints {@code ids 4 5 6} ({@code ids} alone for none);
 * <li>{@code generate:N:PROMPT} and {@code generate-chat:N:PROMPT}:
 *     {@code generate(PROMPT, N, false|true)}: prints {@code text "…"};
 * <li>{@code chat:N:MESSAGE}: {@code chat(MESSAGE, N)}: prints {@code text "…"};
 * <li>{@code reset}: prints {@code reset};
 * <li>{@code close}: closes the model (twice, to show it is idempotent):
 *     prints {@code closed};
 * <li>{@code use-after-close}: calls {@code generateIds} on the closed
 *     model: prints {@code illegal-state MESSAGE}.
 * </ul>
 *
 * Opening prints {@code opened}. The text is JSON (a string literal), so
 * the test compares it exactly. A {@link KilnException} prints
 * {@code error MESSAGE} (on one line) and ends the program with exit
 * status 0: the JVM survived the failure. Anything else (an unexpected
 * exception, a crash) exits otherwise.
 */
public final class KilnModelCheck {
    private KilnModelCheck() {}

    public static void main(String[] args) {
        if (args.length < 3) {
            System.err.println("usage: KilnModelCheck PACKAGE_DIR DEVICE WORKER_GROUPS COMMAND...");
            System.exit(2);
        }
        KilnModel model = null;
        try {
            model = KilnModel.open(args[0], args[1], Integer.parseInt(args[2]));
            System.out.println("opened");
            for (int i = 3; i < args.length; i++) {
                run(model, args[i]);
            }
        } catch (KilnException e) {
            System.out.println("error " + oneLine(e.getMessage()));
        } finally {
            if (model != null) {
                model.close();
            }
        }
        System.out.flush();
    }

    private static void run(KilnModel model, String command) {
        String[] parts = command.split(":", 3);
        switch (parts[0]) {
            case "ids": {
                int[] out = model.generateIds(parseIds(parts[2]), Integer.parseInt(parts[1]));
                StringBuilder line = new StringBuilder("ids");
                for (int id : out) {
                    line.append(' ').append(id);
                }
                System.out.println(line);
                break;
            }
            case "generate":
            case "generate-chat": {
                boolean chat = parts[0].equals("generate-chat");
                System.out.println("text " + json(model.generate(parts[2], Integer.parseInt(parts[1]), chat)));
                break;
            }
            case "chat":
                System.out.println("text " + json(model.chat(parts[2], Integer.parseInt(parts[1]))));
                break;
            case "reset":
                model.reset();
                System.out.println("reset");
                break;
            case "close":
                model.close();
                model.close();
                System.out.println("closed");
                break;
            case "use-after-close":
                try {
                    model.generateIds(new int[] {1}, 1);
                    System.out.println("no-exception");
                } catch (IllegalStateException e) {
                    System.out.println("illegal-state " + oneLine(e.getMessage()));
                }
                break;
            default:
                throw new IllegalArgumentException("unknown command " + command);
        }
        System.out.flush();
    }

    private static int[] parseIds(String list) {
        if (list.isEmpty()) {
            return new int[0];
        }
        String[] items = list.split(",");
        int[] ids = new int[items.length];
        for (int i = 0; i < items.length; i++) {
            ids[i] = Integer.parseInt(items[i].trim());
        }
        return ids;
    }

    private static String oneLine(String message) {
        return String.valueOf(message).replace("\r", "\\r").replace("\n", "\\n");
    }

    /** {@code s} as a JSON string literal (ASCII only: other characters as \\u escapes). */
    static String json(String s) {
        StringBuilder out = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': out.append("\\\""); break;
                case '\\': out.append("\\\\"); break;
                case '\n': out.append("\\n"); break;
                case '\r': out.append("\\r"); break;
                case '\t': out.append("\\t"); break;
                default:
                    if (c < 0x20 || c > 0x7e) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
            }
        }
        return out.append('"').toString();
    }
}
