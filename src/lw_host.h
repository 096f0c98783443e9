/* lw_host.h: host helpers for the Lua front end, part of the public API: what LuaJIT lacks (a
 * wall clock, terminals, memory beyond its 2 GiB cdata limit, durable files and paths, JSON,
 * CRC32C) and the file formats the recipes read and write (safetensors, token shards). A C
 * program that trains needs none of it; lw.h includes it with the training API's headers. The
 * conventions are those of every lw_*.h (docs/c_api.md), and its LW_CDEF region joins theirs in
 * the Lua binding (cmake/gen_cdef.cmake), so it too holds plain declarations only.
 */
#ifndef LW_HOST_H
#define LW_HOST_H

#include "lw_base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* LW_CDEF_BEGIN */

/* ---- clocks, terminals, host memory ---------------------------------------------------------- */

/* Seconds since the Unix epoch (the wall clock, to the microsecond), for timestamps that other
 * processes compare: which checkpoint was saved last. */
double lw_wall_clock(void);
/* Whether file descriptor fd is a terminal (progress lines redraw in place there). */
bool lw_is_terminal(int32_t fd);
/* Zeroed, 64-byte-aligned host memory of `bytes` (activations and other scratch the Lua side
 * needs beyond LuaJIT's 2 GiB cdata limit). [out] owned, release with lw_host_free. An
 * allocation that fails says how many bytes were asked for. */
lw_status lw_host_alloc(int64_t bytes, void **out);
void lw_host_free(void *p);

/* ---- stop requests (preemption) and the file-size limit -------------------------------------- */

/* Makes SIGTERM, SIGUSR1 and SIGINT requests to stop, which a training loop reads at its next
 * step boundary (lw_stop_requested), instead of ending the process mid-step: a preempted job
 * saves a checkpoint and exits. A SIGINT after a request ends the process at once (status 130)
 * with one line. grace_seconds > 0: a process still running that long after the first request
 * ends with late_status (0..255) and a line saying so; 0: no deadline. Again: new grace and
 * status, the handlers as they are. */
lw_status lw_stop_watch(double grace_seconds, int32_t late_status);
/* Puts back the handlers lw_stop_watch replaced and forgets any request and its deadline: the
 * signals end the process again as they did (outside the training loop there is no step's end
 * to wait for; an ending job must die when mpirun kills it). */
void lw_stop_unwatch(void);
/* The signal number of the first stop request since the watch began or was reset (SIGTERM 15,
 * SIGUSR1 10, SIGINT 2 on Linux), 0 when none. */
int32_t lw_stop_requested(void);
/* Forgets the request and its deadline (for a caller that handled it and goes on). */
void lw_stop_reset(void);
/* Ignores SIGXFSZ for the process: a write past the file-size limit (ulimit -f) then fails with
 * EFBIG, reported like a full disk, instead of killing the process mid-write. */
void lw_file_size_limit_as_error(void);

/* ---- JSON (manifests, safetensors headers) -------------------------------------------------- *
 * A strict, bounded parser: RFC 8259 grammar only (no comments, trailing commas, NaN), UTF-8
 * checked, duplicate object keys refused, nesting at most 64 deep. Nodes are numbered, the root
 * is node 0; strings are unescaped and NUL-terminated. */

typedef struct lw_json lw_json;

typedef enum lw_json_type {
    LW_JSON_NULL = 0,
    LW_JSON_FALSE = 1,
    LW_JSON_TRUE = 2,
    LW_JSON_NUMBER = 3,
    LW_JSON_STRING = 4,
    LW_JSON_ARRAY = 5,
    LW_JSON_OBJECT = 6
} lw_json_type;

/* Parses len bytes of text. [out] owned. Errors say what and at which byte. */
lw_status lw_json_parse(const char *text, int64_t len, lw_json **out);
void lw_json_free(lw_json *json);
int32_t lw_json_count(const lw_json *json); /* nodes */
lw_json_type lw_json_type_of(const lw_json *json, int32_t node);
/* Elements of an array or members of an object; 0 for other nodes. */
int32_t lw_json_length(const lw_json *json, int32_t node);
/* The i-th element (array) or member value (object); -1 when out of range. */
int32_t lw_json_child(const lw_json *json, int32_t node, int32_t i);
/* The i-th member name of an object. [borrowed] NULL when out of range. */
const char *lw_json_key(const lw_json *json, int32_t node, int32_t i);
/* The value of member `key` of an object; -1 when absent. */
int32_t lw_json_member(const lw_json *json, int32_t node, const char *key);
double lw_json_number(const lw_json *json, int32_t node);
/* [borrowed] the unescaped string (NUL-terminated; *len bytes, may contain NUL) or NULL. */
const char *lw_json_string(const lw_json *json, int32_t node, int64_t *len);

/* ---- CRC32C (Castagnoli), for checkpoint files ----------------------------------------------- */

/* Continues crc over n bytes; start with 0. */
uint32_t lw_crc32c(uint32_t crc, const void *data, int64_t n);

/* ---- durable files (checkpoints) ------------------------------------------------------------ */

/* Writes n bytes to a new file at path and fsyncs it; [out] *crc (CRC32C) if not NULL. What was
 * at path (a file, a symbolic link) is replaced, never written through: its name is unlinked and
 * created anew, exclusively. A directory there is an error. */
lw_status lw_file_write(const char *path, const void *data, int64_t n, uint32_t *crc);
/* Size and CRC32C of a regular file's contents (a checkpoint's files): a symbolic link, FIFO,
 * device or directory at path is refused without reading or waiting. */
lw_status lw_file_checksum(const char *path, int64_t *bytes, uint32_t *crc);
/* The whole contents of a regular file of at most max_bytes bytes (with follow false, refusing a
 * symbolic link at path): never waits on a FIFO nor reads a device forever. [out] *data owned
 * (release with lw_file_read_free), NUL-terminated after its *n bytes. */
lw_status lw_file_read(const char *path, int64_t max_bytes, bool follow, void **data,
                       int64_t *n);
void lw_file_read_free(void *data);
/* fsync of a directory, so that the names created, renamed or removed in it are durable. */
lw_status lw_dir_sync(const char *path);
/* Creates a directory and its missing parents (an existing directory is fine); when it fails it
 * removes the directories it created, and a path longer than the system takes is refused before
 * anything is created. */
lw_status lw_dir_make(const char *path);
/* Creates one new directory; anything already at path (a directory or a link too) is an error. */
lw_status lw_dir_make_new(const char *path);

typedef enum lw_path_kind {
    LW_PATH_MISSING = 0,
    LW_PATH_FILE = 1,
    LW_PATH_DIR = 2,
    LW_PATH_OTHER = 3, /* a device, socket, fifo, ... */
    LW_PATH_LINK = 4   /* a symbolic link (lw_path_entry_kind only) */
} lw_path_kind;

/* "missing", "file", "dir", "other", "link" (see lw_dtype_name). */
const char *lw_path_kind_name(lw_path_kind kind);
lw_status lw_path_kind_from_name(const char *name, lw_path_kind *out);

/* What is at path (symbolic links followed); a missing path is not an error. */
lw_status lw_path_kind_of(const char *path, lw_path_kind *kind);
/* What the directory entry at path is, a symbolic link not followed (LW_PATH_LINK). */
lw_status lw_path_entry_kind(const char *path, lw_path_kind *kind);
/* Removes a file, or an empty directory. A missing path is an error naming it. */
lw_status lw_path_remove(const char *path);
/* Removes path and everything below it, never following a symbolic link: a link (at path or
 * anywhere below) is removed itself, its target untouched. A missing path is fine. */
lw_status lw_path_remove_tree(const char *path);
/* Renames a file or directory (rename(2): atomic within a file system; replaces a file or an
 * empty directory at `to`). */
lw_status lw_path_rename(const char *from, const char *to);
/* Cuts a file to its first `bytes` bytes (a log's last whole record, after a write failed). */
lw_status lw_file_truncate(const char *path, int64_t bytes);
/* [out] out: path made absolute with every symbolic link resolved, as far as it exists; the
 * missing rest is appended as written (what a run would create there). Two paths with equal
 * results name one file. LW_ERR_INVALID when it does not fit in cap bytes. */
lw_status lw_path_real(const char *path, char *out, int64_t cap);
/* [out] *same: whether a and b both exist and are one file (one device and inode: also hard
 * links); false when either is missing. */
lw_status lw_path_same_file(const char *a, const char *b, bool *same);

/* An exclusive lock on a file (flock(2)), held until freed or until the process ends however it
 * ends, so it is never left behind by a crash. The file is created if missing and holds the
 * holder's "host H, pid P". While another process holds it, LW_ERR_STATE with that line in the
 * message ("files: DIR/.lock is locked by another process (host h, pid 12)"). */
typedef struct lw_file_lock lw_file_lock;
/* [out] owned. */
lw_status lw_file_lock_new(const char *path, lw_file_lock **out);
void lw_file_lock_free(lw_file_lock *lock);

/* The names in a directory (without "." and ".."), sorted bytewise, so every rank and run sees
 * them in one order. */
typedef struct lw_dir_list lw_dir_list;
/* [out] owned. Errors name the directory (missing, not a directory, unreadable). */
lw_status lw_dir_list_new(const char *path, lw_dir_list **out);
void lw_dir_list_free(lw_dir_list *list);
int32_t lw_dir_list_count(const lw_dir_list *list);
/* [borrowed] the i-th name (0-based), NULL when out of range. */
const char *lw_dir_list_name(const lw_dir_list *list, int32_t i);

/* ---- safetensors ----------------------------------------------------------------------------- *
 * Reading is strict and bounded: header length within the file and at most 100 MB, a JSON object
 * of tensors { dtype, shape, data_offsets } (plus an optional "__metadata__" object of strings)
 * whose byte ranges match dtype x shape and tile the data section exactly. */

typedef struct lw_safetensors lw_safetensors;

/* dtype names: F32 F16 BF16 F64 I64 I32 I16 I8 U8 BOOL */
typedef struct lw_tensor_view {
    const char *name;  /* [borrowed] */
    const char *dtype; /* [borrowed] */
    int32_t ndim;      /* 0..8 */
    int64_t shape[8];
    const void *data;  /* [borrowed] into the loaded bytes */
    int64_t bytes;
} lw_tensor_view;

/* Loads and checks a file. [out] owned. Errors name the file and the problem. */
lw_status lw_safetensors_open(const char *path, lw_safetensors **out);
/* The same from bytes in memory (copied), named `what` in errors. */
lw_status lw_safetensors_parse(const void *bytes, int64_t n, const char *what,
                               lw_safetensors **out);
void lw_safetensors_free(lw_safetensors *st);
int32_t lw_safetensors_count(const lw_safetensors *st);
lw_status lw_safetensors_tensor(const lw_safetensors *st, int32_t i, lw_tensor_view *out);
/* Index of tensor `name`; LW_ERR_RANGE if none. */
lw_status lw_safetensors_find(const lw_safetensors *st, const char *name, int32_t *i);
/* [borrowed] a "__metadata__" value, or NULL. */
const char *lw_safetensors_metadata(const lw_safetensors *st, const char *key);

/* Writes n tensors (dtype "F32" etc.; data of shape's size) and metadata pairs (keys[i],
 * values[i]) to path, then fsyncs it. [out] *bytes and *crc (CRC32C of the whole file) when
 * not NULL. */
lw_status lw_safetensors_write(const char *path, const lw_tensor_view *tensors, int32_t n,
                               const char *const *keys, const char *const *values,
                               int32_t n_meta, int64_t *bytes, uint32_t *crc);

/* ---- token shards (the .bin files llm.c and modded-nanogpt write) --------------------------- *
 * A shard is a header of 256 little-endian int32 (magic 20240520, version, token count) and then
 * that many tokens: uint16 (version 1, GPT-2's tokenizer) or uint32 (version 2, llm.c's LLaMA-3
 * variant), little-endian. Every header is checked when the shards are opened; the tokens are
 * mapped read-only (never read whole), so ranks on one node share the page cache. */

typedef struct lw_token_shards lw_token_shards;

typedef struct lw_token_shard_info {
    const char *path; /* [borrowed] the shards' copy of the path given to open */
    int32_t version;  /* 1: uint16 tokens; 2: uint32 tokens */
    int64_t tokens;   /* tokens in this shard */
    int64_t start;    /* global index of its first token */
} lw_token_shard_info;

/* Opens n shards (paths[0 .. n-1], concatenated in that order) and checks every header: the
 * file exists and is a regular file, holds the 1024-byte header, the magic and version are
 * known, the file's size is exactly the header's count of tokens, and that count is > 0.
 * [out] owned. Errors name the file and the problem. */
lw_status lw_token_shards_open(const char *const *paths, int32_t n, lw_token_shards **out);
/* Unmaps every shard. NULL is a no-op. */
void lw_token_shards_free(lw_token_shards *shards);
/* Number of shards. */
int32_t lw_token_shards_count(const lw_token_shards *shards);
/* Tokens in all shards together. */
int64_t lw_token_shards_total(const lw_token_shards *shards);
/* [out] shard i (0-based); LW_ERR_RANGE out of range. */
lw_status lw_token_shards_info(const lw_token_shards *shards, int32_t i,
                               lw_token_shard_info *out);
/* Copies tokens [pos, pos + len) of the concatenated shards into out (int32_t [len]), across
 * shard boundaries. With vocab > 0 every token must be < vocab (0: any token that fits an
 * int32); otherwise the error names the shard, the token and its position in that shard, and
 * out is partly written. LW_ERR_RANGE when [pos, pos + len) is not within [0, total). */
lw_status lw_token_shards_read(const lw_token_shards *shards, int64_t pos, int64_t len,
                               int64_t vocab, int32_t *out);

/* Writes tokens[0 .. n) (each in [0, 65536) for version 1, >= 0 for version 2) as a new shard
 * at path, in the format above (n >= 1), and fsyncs it; what was at path is replaced, never
 * written through. Errors name the file, or the first token out of range and its position. */
lw_status lw_token_shards_write(const char *path, int32_t version, const int32_t *tokens,
                                int64_t n);

/* ---- byte-level BPE tokenizers (GPT-2's kind; docs/tokenizers.md) ---------------------------- *
 * Text is cut into chunks by GPT-2's pre-tokenizer (lw_bpe_chunk); a chunk's bytes become their
 * byte tokens, which merges join, pair by pair, the lowest rank first; special tokens
 * (<|endoftext|>) are found in the text before it is cut. Decoding puts the tokens' bytes one
 * after the other. Ids are below 2^24; a vocabulary read from another program's files may
 * leave gaps (ids that are no token). */

typedef struct lw_bpe lw_bpe;

/* The end of the pre-tokenizer's chunk of text[0 .. len) that begins at byte at (0 <= at < len):
 * a value in (at, len]; at itself when at is outside. */
int64_t lw_bpe_chunk(const char *text, int64_t len, int64_t at);

/* A tokenizer of 256 byte tokens alone: byte b is token byte_ids[b] (byte_ids NULL: token b),
 * the ids distinct. [out] owned. */
lw_status lw_bpe_new(const int32_t *byte_ids, lw_bpe **out);
void lw_bpe_free(lw_bpe *bpe);
/* Appends a merge, ranked after those before it: token left then token right (both tokens of
 * the vocabulary) become the new token id, their bytes joined. Errors name the merge's rank and
 * the id: an unknown token, an id in use, a pair merged already. */
lw_status lw_bpe_add_merge(lw_bpe *bpe, int32_t left, int32_t right, int32_t id);
/* Adds special token id (a new id) of text[0 .. len) (1 to 2^20 bytes, unlike any other
 * special's), found as a whole in the text by lw_bpe_encode when asked. */
lw_status lw_bpe_add_special(lw_bpe *bpe, const char *text, int64_t len, int32_t id);
/* The vocabulary's size: one more than the largest id. */
int32_t lw_bpe_vocab(const lw_bpe *bpe);
int32_t lw_bpe_merge_count(const lw_bpe *bpe);
/* [out] merge `rank`'s pair (left, right) and the token it makes; LW_ERR_RANGE outside. */
lw_status lw_bpe_merge(const lw_bpe *bpe, int32_t rank, int32_t *left, int32_t *right,
                       int32_t *id);
int32_t lw_bpe_special_count(const lw_bpe *bpe);
/* [borrowed] the text of the i-th special token (in the order added), *len bytes, and [out] its
 * *id; NULL when i is out of range. */
const char *lw_bpe_special(const lw_bpe *bpe, int32_t i, int32_t *id, int64_t *len);
/* [borrowed] the bytes of token id (*len of them, not NUL-terminated); NULL when id is no
 * token. */
const char *lw_bpe_token(const lw_bpe *bpe, int32_t id, int64_t *len);
/* Encodes text[0 .. len) into ids (int32_t [len] at least: every token holds one byte or more),
 * [out] *n of them. special: a special token's text becomes its id; false: it is text like any
 * other. The tokenizer keeps a cache of chunks it has encoded: one call at a time per object. */
lw_status lw_bpe_encode(lw_bpe *bpe, const char *text, int64_t len, bool special, int32_t *ids,
                        int64_t *n);
/* The same for a regular file's bytes: [out] *ids owned (release with lw_bpe_ids_free), *n of
 * them. Errors name the file. */
lw_status lw_bpe_encode_file(lw_bpe *bpe, const char *path, bool special, int32_t **ids,
                             int64_t *n);
void lw_bpe_ids_free(int32_t *ids);
/* The bytes of ids[0 .. n), one token's after another, into out (out_cap bytes); [out] *len
 * their count, also when out is NULL (then only counted). LW_ERR_RANGE for an id that is no
 * token (with its position), or out_cap below *len. */
lw_status lw_bpe_decode(const lw_bpe *bpe, const int32_t *ids, int64_t n, char *out,
                        int64_t out_cap, int64_t *len);

/* Training: texts are cut at the special tokens and into chunks, which are counted; training
 * then merges, again and again, the adjacent pair of tokens seen most often within the chunks
 * (ties: the smaller left id, then the smaller right id) into token 256 + its rank, until vocab
 * - n_special tokens exist or no pair is seen min_count times; the special tokens take the ids
 * after the merges, in order. */
typedef struct lw_bpe_trainer lw_bpe_trainer;
/* vocab >= 256 + n_special; min_count >= 1 (2: a pair seen once is never merged); special:
 * [borrowed, copied] n_special NUL-terminated texts. [out] owned. */
lw_status lw_bpe_trainer_new(int32_t vocab, int64_t min_count, const char *const *special,
                             int32_t n_special, lw_bpe_trainer **out);
void lw_bpe_trainer_free(lw_bpe_trainer *trainer);
/* Counts the chunks of text[0 .. len) (one document: no chunk spans two calls). */
lw_status lw_bpe_trainer_add_text(lw_bpe_trainer *trainer, const char *text, int64_t len);
/* The same for a regular file's bytes; errors name the file. */
lw_status lw_bpe_trainer_add_file(lw_bpe_trainer *trainer, const char *path);
/* [out] the bytes added, the chunks counted and how many of them were distinct. */
void lw_bpe_trainer_counts(const lw_bpe_trainer *trainer, int64_t *bytes, int64_t *chunks,
                           int64_t *distinct);
/* Learns the merges from the chunks counted so far. [out] owned: bytes as tokens 0-255. */
lw_status lw_bpe_trainer_train(lw_bpe_trainer *trainer, lw_bpe **out);

/* LW_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* LW_HOST_H */
