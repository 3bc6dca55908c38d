package dev.kiln;

/**
 * A failure of kiln's runtime library, with kiln's own message: a package
 * that cannot be opened (a missing or damaged file, a truncated parameter
 * archive, no module for this device), a prompt that does not fit the
 * model's context, an error of IREE's runtime, and so on.
 *
 * <p>The native side throws it for every failure; the model stays usable
 * after a failed call (a failed {@link KilnModel#open} returns no model).
 */
public class KilnException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /**
     * A failure described by {@code message}.
     *
     * @param message kiln's message, on one line
     */
    public KilnException(String message) {
        super(message);
    }
}
