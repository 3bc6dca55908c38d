package dev.kiln;

import java.util.Objects;

/**
 * A model packaged by {@code kiln package}, loaded in this process by
 * kiln's runtime library ({@code libkiln_runtime.so}, IREE's runtime
 * inside): tokenizer, chat template and generation loop included.
 *
 * <p>One model serves one caller at a time: every method is
 * {@code synchronized}. Generation is greedy. A model holds native memory
 * (the weights, the device, the KV caches) until {@link #close()}: close it,
 * for instance with try-with-resources. Any call after {@code close()}
 * throws {@link IllegalStateException}; failures of the library throw
 * {@link KilnException} with kiln's message.
 *
 * <pre>{@code
 * try (KilnModel model = KilnModel.open(dir, "local-task", 0)) {
 *     String reply = model.chat("What is the capital of France?", 64);
 * }
 * }</pre>
 */
public final class KilnModel implements AutoCloseable {
    static {
        System.loadLibrary("kiln_runtime");
    }

    /** The native model; 0 once closed. */
    private long handle;

    private KilnModel(long handle) {
        this.handle = handle;
    }

    /**
     * Opens the package in {@code dir}.
     *
     * @param dir a folder written by {@code kiln package} (or the files of
     *     it the app installed: the {@code NAME.manifest.json}, the
     *     parameters, the modules for this device and the tokenizer), on
     *     the file system: IREE maps files by path, not from an APK's assets
     * @param device {@code "local-task"} (CPU, a pool of worker threads),
     *     {@code "local-sync"} (CPU, the calling thread only: what the
     *     manifest names for {@code armeabi-v7a}) or {@code "vulkan"} (GPU);
     *     the package's manifest says which device each module runs on
     * @param workerGroups the number of {@code local-task} worker groups
     *     (for instance the number of big cores); 0 lets IREE detect the
     *     CPU's topology
     * @return the loaded model, to {@link #close()} when done
     * @throws KilnException when the package cannot be opened (a missing or
     *     damaged file, no module for this device, an unknown device)
     * @throws IllegalArgumentException when {@code workerGroups} is negative
     * @throws NullPointerException when {@code dir} or {@code device} is null
     */
    public static KilnModel open(String dir, String device, int workerGroups) {
        Objects.requireNonNull(dir, "dir is null");
        Objects.requireNonNull(device, "device is null");
        if (workerGroups < 0) {
            throw new IllegalArgumentException("workerGroups must be 0 (IREE's detection) or more, not " + workerGroups);
        }
        return new KilnModel(nativeOpen(dir, device, workerGroups));
    }

    /**
     * Generates from token ids, with no tokenizer involved: the prompt is
     * prefilled, then up to {@code maxNewTokens} ids are generated until an
     * end-of-sequence id or the end of the model's context. Each call starts
     * a new sequence (it does not continue {@link #chat}'s conversation).
     *
     * @param prompt the prompt's token ids (at least one, each below the
     *     vocabulary size)
     * @param maxNewTokens the most ids to generate
     * @return the new ids only (not the prompt), without the end-of-sequence id
     * @throws KilnException when the prompt is empty, holds an id past the
     *     vocabulary or does not fit the context, or the runtime fails
     * @throws IllegalStateException after {@link #close()}
     */
    public synchronized int[] generateIds(int[] prompt, int maxNewTokens) {
        Objects.requireNonNull(prompt, "prompt is null");
        checkCount(maxNewTokens);
        return nativeGenerateIds(live(), prompt, maxNewTokens);
    }

    /**
     * Generates text from a prompt, encoded with the package's tokenizer;
     * the same text {@code kiln generate --prompt} prints. Each call starts a
     * new sequence (it does not continue {@link #chat}'s conversation).
     *
     * @param prompt the prompt text
     * @param maxNewTokens the most tokens to generate
     * @param chat true to wrap the prompt in the model's chat template as
     *     one user message (as {@code kiln generate --chat} does); false to
     *     use it as it is
     * @return the generated text (not the prompt), up to an end-of-sequence
     *     token, {@code maxNewTokens} tokens or the end of the context
     * @throws KilnException when the package has no tokenizer, the prompt
     *     does not fit the context, or the runtime fails
     * @throws IllegalStateException after {@link #close()}
     */
    public synchronized String generate(String prompt, int maxNewTokens, boolean chat) {
        Objects.requireNonNull(prompt, "prompt is null");
        checkCount(maxNewTokens);
        return nativeGenerate(live(), prompt, maxNewTokens, chat);
    }

    /**
     * One turn of a conversation: {@code userMessage} is rendered with the
     * model's chat template after the turns before it, and the model's
     * reply is generated. The KV caches are kept between turns, so a turn
     * prefills only its own tokens. {@link #reset()} starts a new
     * conversation.
     *
     * @param userMessage the user's message
     * @param maxNewTokens the most tokens of the reply
     * @return the reply's text
     * @throws KilnException when the package has no tokenizer, the
     *     conversation would pass the model's context, or the runtime fails
     * @throws IllegalStateException after {@link #close()}
     */
    public synchronized String chat(String userMessage, int maxNewTokens) {
        Objects.requireNonNull(userMessage, "userMessage is null");
        checkCount(maxNewTokens);
        return nativeChat(live(), userMessage, maxNewTokens);
    }

    /**
     * Forgets the conversation of {@link #chat}: the next turn starts a new
     * one (empty caches). The loaded model stays.
     *
     * @throws KilnException when the runtime fails
     * @throws IllegalStateException after {@link #close()}
     */
    public synchronized void reset() {
        nativeReset(live());
    }

    /**
     * Releases the model's native memory (weights, device, caches). Closing
     * a closed model does nothing; any other call after it throws
     * {@link IllegalStateException}.
     */
    @Override
    public synchronized void close() {
        long h = handle;
        if (h != 0) {
            handle = 0;
            nativeClose(h);
        }
    }

    /** The native handle, or IllegalStateException when closed. */
    private long live() {
        if (handle == 0) {
            throw new IllegalStateException("the KilnModel is closed");
        }
        return handle;
    }

    private static void checkCount(int maxNewTokens) {
        if (maxNewTokens < 0) {
            throw new IllegalArgumentException("maxNewTokens must be 0 or more, not " + maxNewTokens);
        }
    }

    private static native long nativeOpen(String dir, String device, int workerGroups);

    private static native int[] nativeGenerateIds(long handle, int[] prompt, int maxNewTokens);

    private static native String nativeGenerate(long handle, String prompt, int maxNewTokens, boolean chat);

    private static native String nativeChat(long handle, String userMessage, int maxNewTokens);

    private static native void nativeReset(long handle);

    private static native void nativeClose(long handle);
}
