/*
 * kiln_check.c: drives libkiln_runtime.so through its C ABI
 * (runtime/include/kiln_runtime.h) for kiln's end-to-end tests
 * (tests/c_library.rs) and prints one machine-readable line per step, as
 * runtime/java/test/KilnModelCheck.java does for the Java binding.
 *
 *     cc -std=c11 -I runtime/include runtime/c/kiln_check.c \
 *         -L DIR -lkiln_runtime -Wl,-rpath,DIR -o kiln_check
 *     ./kiln_check PACKAGE_DIR DEVICE WORKER_GROUPS COMMAND...
 *
 * Commands, run in order on one model:
 *   ids:N:1,2,3          kiln_model_generate_ids of these ids, at most N
 *                        new: prints `ids 4 5 6` (`ids` alone for none);
 *   generate:N:PROMPT    kiln_model_generate(PROMPT, N, chat 0) and
 *   generate-chat:N:PROMPT  (chat 1): prints `text "..."`;
 *   chat:N:MESSAGE       kiln_model_chat(MESSAGE, N): prints `text "..."`;
 *   reset                kiln_model_reset: prints `reset`;
 *   close                kiln_model_close, then kiln_model_close(NULL)
 *                        (a no-op): prints `closed`;
 *   use-after-close      kiln_model_generate_ids on the closed (NULL)
 *                        model: prints `illegal-state MESSAGE` (its error).
 *
 * Opening prints `opened`. The text is a JSON string literal (ASCII only:
 * other characters as \u escapes, as the Java program writes them), so the
 * test compares it exactly. A failing call prints `error MESSAGE` (on one
 * line) and ends the program with exit status 0: the process survived the
 * failure. A usage mistake exits 2; a crash exits otherwise. Every string
 * the library returns is freed with kiln_string_free.
 *
 * C11 and libc only.
 */
#include "kiln_runtime.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage_error(const char *what, const char *arg) {
    fprintf(stderr, "kiln_check: %s: %s\n", what, arg);
    exit(2);
}

/* `s` as a decimal int32 (the whole string), or exit 2. */
static int32_t parse_i32(const char *s, const char *what) {
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (end == s || *end != '\0' || errno != 0 || v < INT32_MIN || v > INT32_MAX) {
        usage_error(what, s);
    }
    return (int32_t)v;
}

/* Prints `message` on one line (CR and LF as \r and \n). */
static void print_one_line(const char *message) {
    for (const char *p = message; *p; p++) {
        if (*p == '\n') {
            fputs("\\n", stdout);
        } else if (*p == '\r') {
            fputs("\\r", stdout);
        } else {
            putchar(*p);
        }
    }
}

/*
 * Prints `error MESSAGE`, frees the message and the model, and exits 0:
 * the library reported the failure and the process goes on.
 */
static void fail(kiln_model *model, char *error) {
    fputs("error ", stdout);
    print_one_line(error ? error : "(no message)");
    putchar('\n');
    fflush(stdout);
    kiln_string_free(error);
    kiln_model_close(model);
    exit(0);
}

/* One UTF-16 code unit as a JSON escape. */
static void put_u16(unsigned unit) {
    printf("\\u%04x", unit & 0xffffu);
}

/* Prints `s` (UTF-8) as a JSON string literal, ASCII only. */
static void print_json(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    putchar('"');
    while (*p) {
        unsigned c = *p;
        switch (c) {
        case '"': fputs("\\\"", stdout); p++; continue;
        case '\\': fputs("\\\\", stdout); p++; continue;
        case '\n': fputs("\\n", stdout); p++; continue;
        case '\r': fputs("\\r", stdout); p++; continue;
        case '\t': fputs("\\t", stdout); p++; continue;
        default: break;
        }
        if (c >= 0x20 && c <= 0x7e) {
            putchar((int)c);
            p++;
            continue;
        }
        if (c < 0x80) {
            put_u16(c);
            p++;
            continue;
        }
        /* A multi-byte UTF-8 sequence: its code point, or U+FFFD. */
        int len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0;
        unsigned cp = len == 4 ? c & 0x07u : len == 3 ? c & 0x0fu : c & 0x1fu;
        int ok = len > 0;
        for (int i = 1; ok && i < len; i++) {
            if ((p[i] & 0xc0) != 0x80) {
                ok = 0;
            } else {
                cp = (cp << 6) | (p[i] & 0x3fu);
            }
        }
        if (!ok || cp > 0x10ffff) {
            put_u16(0xfffd);
            p++;
            continue;
        }
        if (cp >= 0x10000) {
            cp -= 0x10000;
            put_u16(0xd800 + (cp >> 10));
            put_u16(0xdc00 + (cp & 0x3ff));
        } else {
            put_u16(cp);
        }
        p += len;
    }
    putchar('"');
}

/* Prints `text "..."` for a string the library returned, and frees it. */
static void print_text(kiln_model *model, char *text, char *error) {
    if (text == NULL) {
        fail(model, error);
    }
    fputs("text ", stdout);
    print_json(text);
    putchar('\n');
    kiln_string_free(text);
}

/* The comma-separated ids of `list` into `*ids` (malloc'd); their count. */
static size_t parse_ids(const char *list, int32_t **ids) {
    size_t n = *list ? 1 : 0;
    for (const char *p = list; *p; p++) {
        n += *p == ',';
    }
    *ids = malloc((n ? n : 1) * sizeof(int32_t));
    if (*ids == NULL) {
        usage_error("out of memory", list);
    }
    char *copy = malloc(strlen(list) + 1);
    if (copy == NULL) {
        usage_error("out of memory", list);
    }
    strcpy(copy, list);
    size_t i = 0;
    char *item = copy;
    while (i < n) {
        char *comma = strchr(item, ',');
        if (comma) {
            *comma = '\0';
        }
        (*ids)[i++] = parse_i32(item, "an id");
        item = comma ? comma + 1 : item + strlen(item);
    }
    free(copy);
    return n;
}

/* `ids:N:LIST`: prints `ids ...`. */
static void run_ids(kiln_model *model, int32_t max_new, const char *list) {
    int32_t *prompt = NULL;
    size_t n = parse_ids(list, &prompt);
    size_t capacity = max_new > 0 ? (size_t)max_new : 0;
    int32_t *out = malloc((capacity ? capacity : 1) * sizeof(int32_t));
    if (out == NULL) {
        usage_error("out of memory", list);
    }
    char *error = NULL;
    int64_t got = kiln_model_generate_ids(model, prompt, n, max_new, out, capacity, &error);
    free(prompt);
    if (got < 0) {
        free(out);
        fail(model, error);
    }
    fputs("ids", stdout);
    for (int64_t i = 0; i < got; i++) {
        printf(" %d", (int)out[i]);
    }
    putchar('\n');
    free(out);
}

/* Splits `command` at its first two colons: name, count, rest. */
static void split(char *command, char **name, char **count, char **rest) {
    *name = command;
    *count = NULL;
    *rest = NULL;
    char *c1 = strchr(command, ':');
    if (c1 == NULL) {
        return;
    }
    *c1 = '\0';
    *count = c1 + 1;
    char *c2 = strchr(*count, ':');
    if (c2 != NULL) {
        *c2 = '\0';
        *rest = c2 + 1;
    }
}

/* Runs one command; returns the model (NULL after `close`). */
static kiln_model *run(kiln_model *model, const char *arg) {
    char *command = malloc(strlen(arg) + 1);
    if (command == NULL) {
        usage_error("out of memory", arg);
    }
    strcpy(command, arg);
    char *name, *count, *rest;
    split(command, &name, &count, &rest);
    char *error = NULL;
    int with_count = strcmp(name, "ids") == 0 || strcmp(name, "generate") == 0 ||
                     strcmp(name, "generate-chat") == 0 || strcmp(name, "chat") == 0;
    if (with_count && (count == NULL || rest == NULL)) {
        usage_error("a command needs NAME:N:ARGUMENT", arg);
    }
    if (strcmp(name, "ids") == 0) {
        run_ids(model, parse_i32(count, "a count"), rest);
    } else if (strcmp(name, "generate") == 0 || strcmp(name, "generate-chat") == 0) {
        int32_t chat = strcmp(name, "generate-chat") == 0;
        char *text = kiln_model_generate(model, rest, parse_i32(count, "a count"), chat, &error);
        print_text(model, text, error);
    } else if (strcmp(name, "chat") == 0) {
        char *text = kiln_model_chat(model, rest, parse_i32(count, "a count"), &error);
        print_text(model, text, error);
    } else if (strcmp(name, "reset") == 0) {
        if (kiln_model_reset(model, &error) != 0) {
            fail(model, error);
        }
        puts("reset");
    } else if (strcmp(name, "close") == 0) {
        kiln_model_close(model);
        model = NULL;
        kiln_model_close(model); /* NULL: a no-op */
        puts("closed");
    } else if (strcmp(name, "use-after-close") == 0) {
        int32_t one = 1, out = 0;
        if (kiln_model_generate_ids(model, &one, 1, 1, &out, 1, &error) < 0) {
            fputs("illegal-state ", stdout);
            print_one_line(error ? error : "(no message)");
            putchar('\n');
            kiln_string_free(error);
        } else {
            puts("no-exception");
        }
    } else {
        usage_error("unknown command", arg);
    }
    free(command);
    fflush(stdout);
    return model;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fputs("usage: kiln_check PACKAGE_DIR DEVICE WORKER_GROUPS COMMAND...\n", stderr);
        return 2;
    }
    int32_t workers = parse_i32(argv[3], "WORKER_GROUPS");
    char *error = NULL;
    kiln_model *model = kiln_model_open(argv[1], argv[2], workers, &error);
    if (model == NULL) {
        fail(NULL, error);
    }
    puts("opened");
    fflush(stdout);
    for (int i = 4; i < argc; i++) {
        model = run(model, argv[i]);
    }
    kiln_model_close(model);
    fflush(stdout);
    return 0;
}
