/*
 * kiln_runtime.h: the C ABI of libkiln_runtime.so (crate kiln-runtime).
 *
 * A packaged model (a folder from `kiln package`) opened on a device,
 * generating token ids or text. Every function that can fail takes a
 * `char **error`: on failure it returns NULL (or -1) and, when `error` is
 * not NULL, stores kiln's message there, to be freed with
 * kiln_string_free. Nothing here aborts the calling process: a damaged
 * package, an id past the vocabulary or a prompt past the context is an
 * error. One model serves one caller at a time (calls are serialized).
 */
#ifndef KILN_RUNTIME_H
#define KILN_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A loaded model. */
typedef struct kiln_model kiln_model;

/*
 * Opens the package in `dir` on `device` ("local-task", "local-sync" or
 * "vulkan") with `worker_groups` local-task workers (0: IREE's
 * detection). The package is checked against its manifest before IREE
 * maps anything. Returns NULL on failure.
 */
kiln_model *kiln_model_open(const char *dir, const char *device,
                            int32_t worker_groups, char **error);

/*
 * Generates greedily from `prompt_len` ids, at most `max_new_tokens` new
 * ids, into `out` (room for `out_capacity` ids; generation stops when it
 * is full). A fresh sequence. Returns how many ids were written, or -1.
 */
int64_t kiln_model_generate_ids(kiln_model *model, const int32_t *prompt,
                                size_t prompt_len, int32_t max_new_tokens,
                                int32_t *out, size_t out_capacity,
                                char **error);

/*
 * Generates from the UTF-8 text `prompt` (in the model's chat template as
 * one user message when `chat` is non-zero) and returns the new text
 * (free it with kiln_string_free), or NULL.
 */
char *kiln_model_generate(kiln_model *model, const char *prompt,
                          int32_t max_new_tokens, int32_t chat, char **error);

/*
 * One chat turn: the reply to `message` (free it with kiln_string_free),
 * or NULL. The caches keep the conversation between turns.
 */
char *kiln_model_chat(kiln_model *model, const char *message,
                      int32_t max_new_tokens, char **error);

/* Starts over: the chat and the caches dropped. Returns 0, or -1. */
int32_t kiln_model_reset(kiln_model *model, char **error);

/* Frees the model (NULL is a no-op). */
void kiln_model_close(kiln_model *model);

/* Frees a string returned by this library (NULL is a no-op). */
void kiln_string_free(char *s);

#ifdef __cplusplus
}
#endif

#endif /* KILN_RUNTIME_H */
