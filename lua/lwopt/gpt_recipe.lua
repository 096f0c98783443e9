-- gpt_recipe.lua: the body of recipes/gpt_small.lua (and recipes that change its routing): parse
-- the flags, build the GPT (dense, or a mixture of experts: --n-expert, --preset moe), its
-- buffers and optimizer, train on a byte-level corpus or on token shards (llm.c's format), then
-- report the final validation loss, plot the loss curve and print a sample.
local ffi = require("ffi")
local lw = require("lwopt")
local flags = require("lwopt.flags")
local train = require("lwopt.train")
local data_mod = require("lwopt.data")
local tokens_mod = require("lwopt.tokens")
local safetensors = require("lwopt.safetensors")
local files = require("lwopt.files")
local checkpoint = require("lwopt.checkpoint")
local recipe_tp = require("lwopt.recipe_tp")
local recipe_paths = require("lwopt.recipe_paths")
local recipe_batch = require("lwopt.recipe_batch")
local recipe_log = require("lwopt.recipe_log")
local logs = require("lwopt.logs")
local init_from = require("lwopt.init_from")
local weights = require("lwopt.weights")
local json = require("lwopt.json")
local sampling = require("lwopt.sampling")
local tokenizer = require("lwopt.tokenizer")
local C = require("lwopt.C")

local recipe = {}

-- Choices of the runtime flags, as the C library names them: the modes and shards, and the
-- whole-matrix layouts of the Muon buffers (shard-aligned, and packed); the defaults are the
-- library's.
local lib = C.lib
local RUNTIME, LAYOUT = lib.lw_runtime_defaults(), lib.lw_layout_defaults()
local ALIGNED = {}
for _, a in ipairs({ lib.LW_ALGORITHM_COST, lib.LW_ALGORITHM_LPT,
   lib.LW_ALGORITHM_SIZE_MATCHING, lib.LW_ALGORITHM_PACKED }) do
   ALIGNED[#ALIGNED + 1] = C.name("algorithm", a)
end

-- Model and schedule sizes. vocab is the token vocabulary of token shards (GPT-2's tokenizer
-- for all: the shards llm.c and modded-nanogpt prepare); byte data always has 256.
recipe.presets = {
   tiny = { n_layer = 4, n_embd = 64, n_head = 4, seq = 32, batch = 8, steps = 50, lr = 3e-3,
            warmup = 10, eval_every = 25, vocab = tokens_mod.GPT2_VOCAB },
   small = { n_layer = 6, n_embd = 256, n_head = 8, seq = 128, batch = 8, steps = 500, lr = 3e-3,
             warmup = 50, eval_every = 100, vocab = tokens_mod.GPT2_VOCAB },
   -- small, 4x wider: for measuring sharding where matrices dominate
   wide = { n_layer = 6, n_embd = 1024, n_head = 16, seq = 128, batch = 8, steps = 500, lr = 1e-3,
            warmup = 50, eval_every = 100, vocab = tokens_mod.GPT2_VOCAB },
   -- GPT-2 124M (nanoGPT's and llm.c's): 18865 steps of 524288 tokens are llm.c's 10B-token
   -- FineWeb run (a global batch of 64 sequences of 1024: --batch 8 x --accum 8 / ranks)
   gpt2 = { n_layer = 12, n_embd = 768, n_head = 12, seq = 1024, batch = 8, steps = 18865,
            lr = 6e-4, warmup = 700, eval_every = 250, vocab = tokens_mod.GPT2_VOCAB },
   -- a small mixture of experts: every MLP replaced by 8 experts (4c hidden each), top-2
   moe = { n_layer = 4, n_embd = 128, n_head = 4, seq = 128, batch = 8, steps = 300, lr = 3e-3,
           warmup = 30, eval_every = 100, vocab = tokens_mod.GPT2_VOCAB, n_expert = 8 },
}

-- What a mixture of experts takes when its flags are not given (the preset's, else these).
recipe.MOE_DEFAULTS = { topk = 2, aux_coef = 0.01 }

-- The model's vocabulary (its embedding's and LM head's rows) is the token vocabulary padded up
-- to a multiple of this (GPT-2's 50257: 50304, as nanoGPT's), for matrix shapes that suit the
-- GPU. The padded ids never occur as targets, so they only learn a probability near zero; the
-- loss is the same as without them.
recipe.VOCAB_MULTIPLE = 128

-- The model's vocabulary for a token vocabulary: padded up to a multiple of VOCAB_MULTIPLE.
function recipe.vocab_rows(vocab)
   return math.ceil(vocab / recipe.VOCAB_MULTIPLE) * recipe.VOCAB_MULTIPLE
end

-- The GPT's configuration (lw.nn.GPT, lw.arch.gpt) for a preset, a token vocabulary (token data:
-- the preset's or --vocab; bytes: 256), a sequence length (default the preset's) and the
-- experts (moe: { n_expert, topk, aux_coef, shared_expert }; default the preset's, none for a
-- dense preset; n_expert 0: dense) and the dense MLP's hidden size (default 4 n_embd).
function recipe.gpt_config(preset, vocab, seq, moe, mlp_hidden)
   local p = recipe.presets[preset]
   local cfg = { n_layer = p.n_layer, n_embd = p.n_embd, n_head = p.n_head,
                 vocab = recipe.vocab_rows(vocab), seq_len = seq or p.seq, tied = true,
                 mlp_hidden = mlp_hidden }
   moe = moe or (p.n_expert and { n_expert = p.n_expert })
   if moe and (moe.n_expert or 0) > 0 then
      cfg.n_expert = moe.n_expert
      cfg.topk = moe.topk or p.topk or recipe.MOE_DEFAULTS.topk
      cfg.aux_coef = moe.aux_coef or p.aux_coef or recipe.MOE_DEFAULTS.aux_coef
      cfg.shared_expert = moe.shared_expert or false
   end
   return cfg
end

recipe.flags = {
   { "preset", { "tiny", "small", "wide", "gpt2", "moe" }, "small", "model and schedule size "
     .. "(moe: 4 layers x 128, 8 experts, top-2)" },
   { "steps", "int", nil, "optimizer steps (preset's by default)", min = 1, max = 1e9 },
   { "optimizer", { "muon", "adamw" }, "muon", "muon for matrices + adamw, or adamw for all" },
   { "mode", C.names("mode"), C.name("mode", RUNTIME.mode), "how the optimizer is split" },
   { "layout", ALIGNED, C.name("algorithm", LAYOUT.algorithm), "layout of the Muon buffers" },
   { "zero", "int", RUNTIME.zero, "1: shard optimizer state; 2: and gradients; 3: and parameters",
     min = 1, max = 3 },
   { "shard", C.names("shard"), C.name("shard", RUNTIME.shard), "aligned: each rank owns whole "
     .. "matrices; rows: every matrix split by rows (row-sharded FSDP, for comparison; needs "
     .. "--zero 3)" },
   { "overlap", { "on", "off" }, "on", "overlap communication with backward and forward" },
   { "matmul", C.names("matmul"), "fp32", "the model's matrix products on a GPU: exact fp32; "
     .. "tf32 tensor cores; or bf16 tensor cores: bf16 operands, fp32 accumulation, weights and "
     .. "activations fp32 in memory (autocast-like: activations are not stored in bf16). The CPU "
     .. "computes fp32 whatever is asked" },
   { "param-dtype", { "bf16", "fp32" }, nil, "what the parameter buffers hold and the all-gathers "
     .. "move: bf16 (the optimizer keeps fp32 master weights of what each rank updates; the model "
     .. "reads each layer's weights widened to fp32) or fp32 (default: bf16 on a GPU, fp32 on "
     .. "the CPU)" },
   { "grad-dtype", { "fp32", "bf16" }, "fp32", "what the gradient buffers hold and the "
     .. "reduce-scatters move" },
   { "n-expert", "int", nil, "experts per layer: every MLP becomes a mixture of experts (default: "
     .. "the preset's; none but --preset moe's 8; 0: a dense MLP, also with --preset moe)",
     min = 0, max = 65536 },
   { "topk", "int", nil, "experts each token is routed to (default 2)", min = 1, max = 65536 },
   { "aux-coef", "number", nil, "weight of the load-balancing loss (default 0.01)", min = 0 },
   { "shared-expert", "bool", false, "one more dense MLP every token goes through, besides its "
     .. "experts" },
   { "mlp-hidden", "int", nil, "hidden size of the dense MLP (default 4 x the model width), "
     .. "e.g. to match a mixture of experts' active parameters", min = 1, max = 2 ^ 31 - 1 },
   { "ep", "int", 1, "expert parallelism: groups of EP consecutive ranks share out each layer's "
     .. "experts (n_expert / EP each) and exchange tokens; EP must divide --n-expert and the "
     .. "ranks", min = 1, max = 65536 },
   { "tp", "int", 1, "tensor parallelism: groups of TP consecutive ranks split every layer's "
     .. "heads, MLP channels and vocabulary (padded to a multiple of TP) and see the same batches; "
     .. "TP must divide the ranks, the heads and 4 x n_embd; dense models, not with --ep yet",
     min = 1, max = 65536 },
   { "muon-tp-mode", C.names("muon_tp_mode"), nil, "how Muon orthogonalises a matrix split over "
     .. "--tp: duplicated (gathers it, every TP rank runs Newton-Schulz on the whole: as at tp 1), "
     .. "distributed (all-reduces the Gram matrices: as at tp 1, less memory), blockwise (each "
     .. "shard alone: no communication, a different optimizer) (default duplicated)" },
   { "split-qkv", { "on", "off" }, "on", "Muon orthogonalises the fused attention weight's Q, K "
     .. "and V blocks separately (as Megatron does)" },
   { "muon-precision", C.names("ns_precision"), nil, "arithmetic of Newton-Schulz on a GPU "
     .. "(default: the library's, bf16; the CPU computes fp32 whatever is asked)" },
   { "device", "string", "cpu", "where to train: cpu; cuda (under mpirun, each rank's own GPU, "
     .. "by its place on its machine); cuda:N (that GPU, for every rank: ranks sharing one GPU "
     .. "exchange its buffers through host memory)" },
   { "device-comm", C.names("device_comm"), "auto", "how ranks exchange GPU buffers: nccl (a GPU "
     .. "per rank), staged (copied through host memory and moved by MPI: ranks sharing a GPU, "
     .. "a build without NCCL; slower), auto (nccl where every rank has its own GPU, else "
     .. "staged)" },
   { "batch", "int", nil, "sequences per rank per micro-step", min = 1, max = 1e6 },
   { "seq", "int", nil, "sequence length", min = 1, max = 1e6 },
   { "accum", "int", nil, "micro-steps per optimizer step (default 1, or what --global-batch "
     .. "makes it; a resume keeps the checkpoint's global batch by changing it)", min = 1,
     max = 1e6 },
   { "global-batch", "int", nil, "sequences per optimizer step over all ranks (--batch x "
     .. "--accum x data-parallel ranks, as Megatron's --global-batch-size): sets --accum",
     min = 1, max = 1e12 },
   { "seed", "int", 1337, "seed of initialisation and data order", min = 0 },
   { "lr", "number", nil, "peak learning rate", above = 0 },
   { "warmup", "int", nil, "warmup steps", min = 0 },
   { "clip", "number", 1.0, "gradient norm clip (0: none)", min = 0 },
   { "bucket-size", "size", nil, "bucket size in elements (default: one bucket per buffer)",
     min = 1 },
   { "eval-every", "int", nil, "steps between validation evaluations (0: only at the end)",
     min = 0 },
   { "eval-max", "int", 64, "validation sequences per evaluation", min = 1 },
   { "data", "string", nil, "text file (bytes; default: the KJV corpus in data/), or token "
     .. "shards: a .bin path or a pattern (data/fineweb10B/fineweb_train_*.bin)" },
   { "val-data", "string", nil, "validation token shards (default: --data with train -> val in "
     .. "the file name when that matches files, else the last 5% of --data)" },
   { "vocab", "int", nil, "token vocabulary of token shards (default: the preset's, 50257: "
     .. "GPT-2's); the model's is it padded to a multiple of 128. Byte data: 256", min = 1,
     max = 2 ^ 31 - 1 },
   { "log", "string", nil, "JSON lines per step; the loss curve PNG goes next to it" },
   { "save-params", "string", nil, "write the final parameters as safetensors" },
   { "init-from", "string", nil, "start from the weights in this safetensors file (--save-params, "
     .. "a checkpoint's model.safetensors, or an `lwopt export` in hf-gpt2 or nanogpt names; F32, "
     .. "BF16 or F16) instead of the seeded initialisation, with a fresh optimizer; a --resume "
     .. "that finds a checkpoint takes the checkpoint's weights instead" },
   { "ckpt-dir", "string", nil, "save checkpoints into this directory" },
   { "ckpt-every", "int", 0, "steps between checkpoints (0: only at the end)", min = 0 },
   { "keep", "int", nil, "checkpoints of this run kept, the newest (default 3)", min = 1 },
   { "resume", { "auto", "strict" }, nil, "continue from the checkpoint latest names in "
     .. "--ckpt-dir, if any; when it is missing or damaged, from the newest whole checkpoint of "
     .. "the same run (auto, the default), or not at all (strict)", bare = "auto" },
   { "overwrite", "bool", false, "start a new run in a --ckpt-dir that holds checkpoints "
     .. "(replaced step by step as the new run saves; without this flag such a directory is "
     .. "refused)" },
   { "stop-after", "int", nil, "stop after this step (checkpointed with --ckpt-dir); the "
     .. "schedule still spans --steps", min = 1 },
   { "max-skips", "int", 10, "stop after this many steps in a row skipped for non-finite "
     .. "gradients (0: never stop)", min = 0 },
   { "timeout", "number", nil, "seconds a collective may wait for the other ranks before the "
     .. "job ends (default: LWOPT_TIMEOUT, else 600; 0: wait forever)", min = 0 },
   { "sample", "int", sampling.COUNT, "characters (token data: tokens) to generate at the end "
     .. "(0: none)", min = 0, max = 1e6 },
   { "prompt", "string", nil, "prompt for the sample (default 'And God said'; token data: token "
     .. "ids separated by spaces, as --prompt-ids, default the first 8 validation tokens)" },
   { "prompt-ids", "string", nil, "token data: the sample's prompt as token ids, 1,2,3 (text "
     .. "cannot be encoded: a tokenizer file has no BPE merges)" },
   { "tokenizer", "string", nil, "token data: llm.c's gpt2_tokenizer.bin, to print the sample "
     .. "as text instead of token ids" },
   { "temperature", "number", sampling.TEMPERATURE, "the sample's temperature", above = 0 },
   { "top-k", "int", nil, "sample among the k likeliest tokens only (default: all)", min = 1 },
   { "quiet", "bool", false, "no progress lines" },
   { "progress", { "auto", "redraw", "lines" }, "auto",
     "redraw the progress line in place, or a line per step (auto: redraw on a terminal, not "
     .. "under mpirun, whose ranks always see one)" },
   { "help", "bool", false, "this text" },
}

-- Exit statuses besides 0 and 1 (an error): usage errors, and a run stopped by divergence.
recipe.EXIT_USAGE = 2
recipe.EXIT_DIVERGED = 3

local function usage(script)
   return ("usage: [mpirun -np N] luajit %s [flags]\n"):format(script) .. flags.usage(recipe.flags)
end

-- The next state of a 31-bit linear congruential generator: seeded, the same on every rank.
local function lcg(state) return (state * 1103515245 + 12345) % 2147483648 end

-- Seeded parameter initialisation, the same on every rank (GPT-2's: normal(0, 0.02), residual
-- projections scaled by 1/sqrt(2 n_layer), norm gains 1, biases 0), one parameter at a time in
-- definition order (collective at ZeRO-3, where each is written into its gathered group). every:
-- the ep 1 (tp 1) model's parameters with --ep (--tp), whose draws are made in its order, those
-- of experts held by another EP rank skipped, so every --ep starts from the same values; with
-- --tp (g: lw.tp.groups's table) a sharded tensor's draws are the whole tp 1 tensor's, of which
-- this TP rank keeps its shard, so every --tp starts from the same values too.
local function init_params(model, ddp, seed, n_layer, every, g)
   local state = seed
   local function uniform()
      state = lcg(state)
      return (state + 0.5) / 2147483648
   end
   local function normal() -- Box-Muller
      return math.sqrt(-2 * math.log(uniform())) * math.cos(2 * math.pi * uniform())
   end
   local held = {}
   for _, spec in ipairs(model:parameters()) do held[spec.name] = spec end
   for _, spec in ipairs(every or model:parameters()) do
      local mine = held[spec.name]
      if mine then
         ddp:with_param(spec.name, function(p)
            if spec.role == "norm" then
               p:fill(1)
            elseif spec.role == "bias" then
               p:fill(0)
            else
               local std = 0.02
               if spec.name:match("proj%.weight$") then std = 0.02 / math.sqrt(2 * n_layer) end
               local into = p.data
               -- a TP shard: the tp 1 model's tensor drawn, this rank's shard kept
               if mine.tp then into = ffi.new("float[?]", lw.tp.numel(spec.shape)) end
               for i = 0, lw.tp.numel(spec.shape) - 1 do into[i] = std * normal() end
               if mine.tp then lw.tp.from_model(into, mine, g.size, g.rank, p.data) end
            end
         end)
      elseif spec.role ~= "norm" and spec.role ~= "bias" then
         -- another EP rank's expert: its draws, skipped
         local numel = 1
         for _, d in ipairs(spec.shape) do numel = numel * d end
         for _ = 1, numel do normal() end
      end
   end
end

-- The flag of each runtime choice that lw.ddp.check's messages name ("zero 2", "mode 'legacy'").
local FLAG_OF = { zero = "zero", mode = "mode", shard = "shard", algorithm = "layout" }

-- lw.ddp.check's message in flag words: "zero 3 ...; mode 'legacy' keeps them whole" reads
-- "--zero 3 ...; --mode legacy keeps them whole".
local function in_flag_words(message)
   message = message:gsub("^runtime: ", ""):gsub("zero (%d+)", "--zero %1")
   return (message:gsub("(%a+) '([%w_]+)'", function(choice, value)
      if FLAG_OF[choice] then return ("--%s %s"):format(FLAG_OF[choice], value) end
   end))
end

-- The data's kind ("bytes": a text file; "tokens": token shards), its vocabulary (v.vocab: every
-- token is below it) and the model's (v.vocab_rows, padded), and for token data the sample's
-- prompt as token ids (v.prompt_ids) and the tokenizer that decodes it (v.tokenizer_read).
local function check_data_flags(v, preset)
   v.data_kind = v.data and tokens_mod.is_shards(v.data) and "tokens" or "bytes"
   if v.data_kind == "bytes" then
      if v.vocab and v.vocab ~= 256 then
         error(("--vocab %d: a text file is read as bytes, a vocabulary of 256 (--vocab is for "
            .. "token shards: a .bin path or a pattern in --data)"):format(v.vocab), 0)
      end
      if v.val_data then
         error("--val-data is for token shards (a .bin path or a pattern in --data); a text "
            .. "file's validation split is its last 5%", 0)
      end
      if v.prompt == "" then
         error("--prompt: the sample needs a prompt of one byte or more", 0)
      end
      for _, name in ipairs({ "prompt_ids", "tokenizer" }) do
         if v[name] then
            error(("--%s is for token shards (a .bin path or a pattern in --data); a text file's "
               .. "sample is its bytes, its prompt --prompt"):format(name:gsub("_", "-")), 0)
         end
      end
      v.vocab, v.vocab_rows = 256, 256
      return
   end
   v.vocab_given = v.vocab ~= nil
   v.vocab = v.vocab or preset.vocab
   v.vocab_rows = recipe.vocab_rows(v.vocab)
   if v.prompt and v.prompt_ids then
      error("--prompt and --prompt-ids both give the prompt: choose one", 0)
   end
   if v.prompt then
      local ok, ids = pcall(sampling.parse_ids, v.prompt, v.vocab, "--prompt")
      if not ok then
         error(ids .. " (with token shards --prompt is token ids: text cannot be encoded into "
            .. "tokens, a tokenizer file holds no BPE merges)", 0)
      end
      v.prompt_ids = ids
   elseif v.prompt_ids then
      v.prompt_ids = sampling.parse_ids(v.prompt_ids, v.vocab, "--prompt-ids")
   end
   if v.tokenizer then
      v.tokenizer_read = tokenizer.load(v.tokenizer)
      if v.tokenizer_read.vocab < v.vocab then
         error(("--tokenizer %s has %d tokens, fewer than the vocabulary (%d): another "
            .. "tokenizer?"):format(v.tokenizer, v.tokenizer_read.vocab, v.vocab), 0)
      end
   end
end

-- The experts: --n-expert (or the preset's), --topk, --aux-coef, --shared-expert, refused where
-- they cannot route (the flags' bounds already refuse --n-expert < 2 and --topk < 1). v gains
-- n_expert (0: dense) and, with experts, topk and aux_coef.
local function check_expert_flags(v, preset)
   v.n_expert = v.n_expert or preset.n_expert or 0
   if v.n_expert == 1 then
      error("--n-expert 1: a mixture of experts needs at least 2 (0: a dense MLP)", 0)
   end
   if v.n_expert == 0 then
      for _, name in ipairs({ "topk", "aux_coef", "shared_expert" }) do
         if v[name] then
            error(("--%s is for a mixture of experts: add --n-expert (or --preset moe)")
               :format(name:gsub("_", "-")), 0)
         end
      end
      return
   end
   if v.mlp_hidden then
      error("--mlp-hidden sizes the dense MLP, which a mixture of experts replaces: drop it, or "
         .. "add --n-expert 0", 0)
   end
   v.topk = v.topk or preset.topk or recipe.MOE_DEFAULTS.topk
   v.aux_coef = v.aux_coef or preset.aux_coef or recipe.MOE_DEFAULTS.aux_coef
   if v.topk > v.n_expert then
      error(("--topk %d is more than the %d experts (--n-expert%s): each token goes to topk "
         .. "distinct experts"):format(v.topk, v.n_expert,
         v.n_expert == preset.n_expert and (", --preset %s's"):format(v.preset) or ""), 0)
   end
end

-- Flag values and combinations that cannot work, refused before any work (every rank sees the
-- same flags, so every rank refuses alike). v gains the preset's values where a flag is unset.
local function check_flags(v)
   -- the same choices main gives lw.ddp.new, checked by the library's rules
   local ok, why = lw.ddp.check({ mode = v.mode, zero = v.zero, shard = v.shard,
      algorithm = v.mode == "layerwise" and v.shard == "aligned" and v.layout or nil })
   if not ok then error(in_flag_words(why), 0) end
   if v.device ~= "cpu" and v.device ~= "cuda" and not v.device:match("^cuda:%d+$") then
      error(("--device must be cpu, cuda or cuda:N (a GPU's number), got '%s'"):format(v.device),
         0)
   end
   if v.device ~= "cpu" and not lw.has_cuda() then
      local _, why = pcall(lw.ddp.device, v.device)
      error(("--device %s: "):format(v.device) .. tostring(why):gsub("^lw%.ddp%.new: ", "")
         .. "; use --device cpu", 0)
   end
   if v.device == "cpu" and v.device_comm ~= "auto" then
      error(("--device-comm %s is for GPU buffers: add --device cuda (or cuda:N)")
         :format(v.device_comm), 0)
   end
   -- bf16 parameters where the model's GEMMs run on tensor cores; on the CPU fp32 (bench/)
   v.param_dtype = v.param_dtype or (v.device == "cpu" and "fp32" or "bf16")
   if not v.ckpt_dir then
      for _, name in ipairs({ "resume", "overwrite", "keep", "ckpt_every" }) do
         if v[name] and v[name] ~= 0 then
            error(("--%s needs --ckpt-dir"):format(name:gsub("_", "-")), 0)
         end
      end
   end
   if v.resume and v.overwrite then
      error("--resume continues the checkpoints in --ckpt-dir and --overwrite replaces them: "
         .. "choose one", 0)
   end
   local preset = recipe.presets[v.preset]
   v.from_preset = {}
   for _, k in ipairs({ "steps", "batch", "seq", "lr", "warmup", "eval_every" }) do
      if v[k] == nil then v[k], v.from_preset[k] = preset[k], true end
   end
   v.keep = v.keep or 3
   v.n_layer, v.n_embd, v.n_head = preset.n_layer, preset.n_embd, preset.n_head
   check_expert_flags(v, preset)
   check_data_flags(v, preset)
   recipe_tp.check_flags(v)
   if v.ep > 1 then
      local bad = lw.ep.check(v.ep, v.ep, v.n_expert)
      if bad then error("--" .. bad, 0) end
   end
end

-- Outputs checked on every rank before the first step (each rank the paths it writes: the
-- checkpoint directory all of them, the log, loss curve and parameters rank 0), the checkpoint
-- directory locked for this job (rank 0 holds the lock, returned; nil without --ckpt-dir), and
-- a new run refused in a checkpoint directory that holds another run's checkpoints. Collective.
local function check_outputs(comm, v)
   local lock
   if v.ckpt_dir then
      local looked, kind = pcall(files.kind, v.ckpt_dir)
      v.ckpt_dir_existed = not looked or kind ~= "missing"
      comm:barrier() -- every rank looks before any creates it
   end
   local ok, err = pcall(function()
      local function must(good, message) if not good then error(message, 0) end end
      if v.ckpt_dir then
         must(files.check_writable_dir(v.ckpt_dir, "--ckpt-dir", "r" .. comm.rank))
         if comm.rank == 0 then
            local why, busy
            lock, why, busy = checkpoint.lock(v.ckpt_dir)
            must(lock, busy and ("--ckpt-dir %s: two jobs saving into one directory would write "
               .. "over each other's checkpoints: wait for the other one to end, or choose "
               .. "another directory"):format(why)
               or ("--ckpt-dir %s cannot be locked: %s"):format(v.ckpt_dir, why))
            local good
            good, why = checkpoint.check_dir(v.ckpt_dir)
            must(good, ("--ckpt-dir %s: %s"):format(v.ckpt_dir, why))
         end
         if comm.rank == 0 and not v.resume then
            local holds, what = checkpoint.holds(v.ckpt_dir)
            if holds and not v.overwrite then
               error(("--ckpt-dir %s already holds checkpoints (%s): add --resume to continue "
                  .. "from them, --overwrite to start a new run over them, or choose another "
                  .. "directory"):format(v.ckpt_dir, what), 0)
            end
         end
      end
      if comm.rank == 0 then
         if v.log then
            must(files.check_writable(v.log, "--log"))
            must(files.check_writable(recipe_paths.plot(v.log), "the loss curve next to --log"))
         end
         if v.save_params then must(files.check_writable(v.save_params, "--save-params")) end
      end
   end)
   comm:agree(ok, err)
   return lock
end

-- Bytes per rank, printed as a table at the end of a run.
-- On a GPU a last column: the GPU's memory in use as its driver counts it.
local function memory_table(by_rank)
   local gpu = by_rank.gpu
   local lines = { "memory per rank (MiB): rank  params  master  grads  optimizer  activations"
      .. "  peak" .. (gpu and "  gpu in use" or "") }
   for r = 1, #by_rank.params do
      lines[#lines + 1] = ("  %4d %8.2f %7.2f %6.2f %10.2f %12.2f %6.2f"):format(r - 1,
         by_rank.params[r], by_rank.master[r], by_rank.grads[r], by_rank.optimizer[r],
         by_rank.activations[r], by_rank.peak[r]) .. (gpu and ("  %10.2f"):format(gpu[r]) or "")
   end
   return table.concat(lines, "\n")
end

-- Draws the log's train and validation losses (nats per `unit`: byte, token) with gnuplot
-- (lwopt.logs, as `lwopt plot` does); returns the PNG's path, or nil and why not. Non-finite
-- losses (null in the log) are gaps in the curve.
local function plot(log_path, unit)
   local read, log = pcall(logs.read, log_path)
   if not read then return nil, log end
   return logs.plot({ log }, { out = recipe_paths.plot(log_path),
      data = recipe_paths.plot_data(log_path), unit = unit })
end

-- The sample's heading and text (lwopt.sampling, as `lwopt sample` prints from a checkpoint):
-- bytes as text after the prompt, among the bytes of the training text; token data's ids (the
-- prompt: --prompt-ids or the first 8 validation tokens), decoded with --tokenizer when given.
local function sample_text(run, v)
   local s = { count = v.sample, seq = v.seq, seed = v.seed, vocab = v.vocab,
               temperature = v.temperature, top_k = v.top_k, tokenizer = v.tokenizer_read }
   if run.data.kind ~= "tokens" then
      s.kind, s.prompt = "bytes", v.prompt or sampling.BYTE_PROMPT
      s.allowed = sampling.bytes_seen(run.data)
   else
      s.kind = "tokens"
      s.prompt = v.prompt_ids
      if s.prompt == nil then
         s.prompt, s.prompt_from = sampling.default_token_prompt(run.data, v.seq)
      end
   end
   return sampling.text(run.model, s)
end

-- What one position of the data is: "byte" or "token".
local function unit_of(data) return data.kind == "tokens" and "token" or "byte" end

-- The data in a few words: "kjv.txt (4298239 bytes)", "fineweb_train_*.bin (1073741824 tokens)".
function recipe.data_name(data)
   return ("%s (%d %s)"):format(data.path:match("([^/]*)$"), data.n, data.kind == "tokens"
      and "tokens" or "bytes")
end

-- The settings a checkpoint records (manifest extra) for this run's flags.
local function settings(v, comm, data)
   return { preset = v.preset, n_layer = v.n_layer, n_embd = v.n_embd, n_head = v.n_head,
            seq = v.seq, batch = v.batch, accum = v.accum, seed = v.seed, lr = v.lr,
            warmup = v.warmup, steps = v.steps, optimizer = v.optimizer, zero = v.zero,
            shard = v.shard, mode = v.mode, layout = v.layout, clip = v.clip,
            data = recipe.data_name(data), data_kind = v.data_kind, vocab = v.vocab,
            ranks = comm.size, global_batch = recipe_batch.global(v, comm.size / v.tp),
            n_expert = v.n_expert, shared_expert = v.shared_expert,
            topk = v.topk, aux_coef = v.aux_coef, ep = v.ep, tp = v.tp,
            muon_tp_mode = v.muon_tp_mode, split_qkv = v.split_qkv,
            mlp_hidden = v.n_expert == 0 and (v.mlp_hidden or 4 * v.n_embd) or nil,
            -- what `lwopt eval` and `lwopt sample` repeat: the validation sequences, and the
            -- bytes the sample draws among
            eval_max = v.eval_max,
            bytes_seen = data.kind ~= "tokens" and sampling.bytes_mask(sampling.bytes_seen(data))
               or nil }
end

-- The model's settings, which --save-params records in its file's metadata (weights.SETTINGS_KEY)
-- so that `lwopt export` knows its heads and vocabulary without a checkpoint; a resume cannot
-- change them, so a resumed run writes the same bytes as an uninterrupted one.
local function model_settings(v)
   return { n_layer = v.n_layer, n_embd = v.n_embd, n_head = v.n_head, seq = v.seq,
            data_kind = v.data_kind, vocab = v.vocab, n_expert = v.n_expert,
            shared_expert = v.shared_expert,
            mlp_hidden = v.n_expert == 0 and (v.mlp_hidden or 4 * v.n_embd) or nil }
end

-- Settings that change the model's shape or its optimizer state, or what its tokens mean: a
-- checkpoint made with other values cannot continue this run.
local BREAKING = {
   { "data_kind", "--data" }, { "vocab", "--vocab" },
   { "n_layer", "--preset" }, { "n_embd", "--preset" }, { "n_head", "--preset" },
   { "seq", "--seq" }, { "optimizer", "--optimizer" }, { "n_expert", "--n-expert" },
   { "shared_expert", "--shared-expert" }, { "mlp_hidden", "--mlp-hidden" },
}
-- What a checkpoint that does not record a setting was trained with (those before token data
-- were all byte-level).
local BEFORE = { data_kind = "bytes", vocab = 256, n_expert = 0, shared_expert = false }
local KIND_WORDS = { bytes = "bytes of a text file", tokens = "token shards" }
-- Settings a resumed run may change; the difference is printed.
local NOTED = { "batch", "accum", "global_batch", "seed", "lr", "warmup", "steps", "zero", "shard",
   "mode", "layout", "clip", "data", "ranks", "topk", "aux_coef", "ep", "tp", "muon_tp_mode",
   "split_qkv" }

local function flag_value(key, value)
   if key == "ranks" then
      return ("%s rank%s"):format(tostring(value), value == 1 and "" or "s")
   end
   return ("--%s %s"):format(key:gsub("_", "-"), type(value) == "number"
      and ("%.10g"):format(value) or tostring(value))
end

-- Compares the checkpoint's recorded settings with this run's: refuses the breaking
-- differences, returns the others as one line (or nil), leaving out the keys in `said` (told
-- on a line of their own).
local function compare_settings(saved, now, path, said)
   for _, b in ipairs(BREAKING) do
      local key, flag = b[1], b[2]
      local was = saved[key]
      if was == nil and saved.n_layer ~= nil then was = BEFORE[key] end
      if was ~= nil and was ~= now[key] then
         local what = key == "data_kind"
            and ("%s as --data, but the checkpoint was trained on %s"):format(KIND_WORDS[now[key]],
               KIND_WORDS[was] or tostring(was))
            or flag == "--preset"
            and ("--preset %s (%d layers x %d, %d heads), but the checkpoint's model is --preset "
               .. "%s (%s layers x %s, %s heads)"):format(now.preset, now.n_layer, now.n_embd,
               now.n_head, tostring(saved.preset), tostring(saved.n_layer), tostring(saved.n_embd),
               tostring(saved.n_head))
            or ("%s, but the checkpoint was trained with %s"):format(flag_value(key, now[key]),
               flag_value(key, was))
         error(("--resume: this run has %s: %s cannot continue it (resume with the checkpoint's "
            .. "setting, or start a new run in another --ckpt-dir)"):format(what, path), 0)
      end
   end
   local changed = {}
   for _, key in ipairs(NOTED) do
      if saved[key] ~= nil and saved[key] ~= now[key] and not (said and said[key]) then
         changed[#changed + 1] = ("%s (was %s)"):format(flag_value(key, now[key]),
            key == "ranks" and tostring(saved[key]) or
            flag_value(key, saved[key]):gsub("^%-%-%S+ ", ""))
      end
   end
   return #changed > 0 and ("settings changed since the checkpoint: " .. table.concat(changed,
      ", ")) or nil
end

-- This run's settings (the checkpoints' extra) with --accum at accum.
local function with_accum(run, v, accum)
   local dp = (run.dp_comm or run.comm).size
   return setmetatable({ accum = accum, global_batch = v.batch * accum * dp },
      { __index = run.checkpoint.extra })
end

-- Resuming the checkpoint at path (saved: its settings): the --accum that keeps its global batch
-- (recipe_batch.keep: raises when none can) and the line that says so, or nil.
local function kept_accum(run, v, saved, path)
   return recipe_batch.keep(saved, v, (run.dp_comm or run.comm).size, path)
end

-- With --resume: finds the checkpoint (rank 0 looks, every rank loads), refuses one made for
-- another model or whose global batch cannot be kept, keeps it, says what was resumed or why
-- nothing was, and sets the run's lineage. Collective.
local function resume(run, v, say)
   local comm, ck = run.comm, run.checkpoint
   local found, why
   local ok, err = pcall(function()
      if comm.rank ~= 0 then return end
      found, why = checkpoint.find(v.ckpt_dir, { strict = v.resume == "strict" })
      if not v.ckpt_dir_existed then
         why = v.ckpt_dir .. " did not exist (it was created for this run's checkpoints)"
      end
      if found then
         local saved = found.manifest.extra or {}
         local accum, line = kept_accum(run, v, saved, found.path)
         found.changes = compare_settings(saved, with_accum(run, v, accum), found.path,
            line and { accum = true })
      end
   end)
   comm:agree(ok, err)
   local path = comm:broadcast_string(found and found.path or "", 0)
   if path == "" then
      say(("nothing to resume: %s; starting at step 1"):format(why))
      return false
   end
   if found and found.note then say("resume: " .. found.note) end
   local m = checkpoint.load(path, { ddp = run.ddp, opt = run.opt, ep = run.ep, tp = run.tp,
      comm = run.comm })
   -- every rank takes the same --accum from the same manifest
   local accum, batch_line = kept_accum(run, v, m.extra or {}, path)
   local now = with_accum(run, v, accum)
   v.accum, run.accum, ck.extra.accum, ck.extra.global_batch = accum, accum, accum,
      now.global_batch
   run.start_step = m.step + 1
   -- the tokens trained on before, which the log's step records count on from
   run.tokens_before = type(m.extra) == "table" and tonumber(m.extra.tokens) or nil
   ck.resumed_from = path
   ck.run_id = type(m.run_id) == "string" and m.run_id or nil
   say(("resumed from %s: step %d, saved on %d rank%s"):format(path, m.step, m.ranks,
      m.ranks == 1 and "" or "s"))
   if batch_line then say("resume: " .. batch_line) end
   if m.conversion then say("resume: " .. m.conversion) end
   if found and found.changes then say("resume: " .. found.changes) end
   return true
end

-- What a run stopped by a failed output (train.run's ended.stopped) says: why, and where its
-- training state is (the checkpoint saved at that step, else the last this run saved).
local function stopped_text(run, v, stopped)
   local unsaved = stopped.save_error and ("the checkpoint of step %d could not be saved: %s")
      :format(stopped.step, stopped.save_error)
   local lines = { ("stopped after step %d: %s"):format(stopped.step, stopped.why or unsaved) }
   if stopped.why and unsaved then lines[#lines + 1] = unsaved end
   local ck = run.checkpoint
   local last = stopped.checkpoint or (ck and (ck.last_saved or ck.resumed_from))
   if last then
      lines[#lines + 1] = ("the training state is in %s: resume from it with --resume once the "
         .. "outputs can be written"):format(last)
   elseif ck then
      lines[#lines + 1] = "no checkpoint of this run could be saved"
   end
   return table.concat(lines, "\n")
end

-- The end of a run: memory per rank, the final validation loss, the loss curve, the
-- parameters and the sample, each independent of the others (one failing skips none of the
-- rest, and the parameters are always written when asked). Collective. Returns the exit status
-- every rank agrees on: 0, 1 when an output failed, EXIT_DIVERGED when the run diverged.
local function finish(run, v, records, ended, say)
   local comm, ddp = run.comm, run.ddp
   local problems = {}
   local function attempt(what, fn)
      local ok, err = pcall(fn)
      if not ok then problems[#problems + 1] = what .. ": " .. tostring(err) end
   end
   ddp:finish_param_sync()
   local memory = train.memory_by_rank(run) -- collective
   if not v.quiet then say(memory_table(memory)) end
   local final = records[#records]
   if ended.stopped then say(stopped_text(run, v, ended.stopped), io.stderr) end
   if ended.diverged then
      say(("stopped: %d steps in a row (from step %d) had non-finite gradients, so the loss "
         .. "diverged and no update was made; lower --lr (now %g) or --warmup, or raise "
         .. "--max-skips (now %d)"):format(ended.skips_in_a_row, ended.first_skip, v.lr,
         v.max_skips), io.stderr)
   elseif final and final.val_loss then
      say(("final validation loss %.4f (%.3f bits/%s)"):format(final.val_loss,
         final.val_loss / math.log(2), unit_of(run.data)))
   end
   if v.log and comm.rank == 0 and #records > 0 then
      attempt("loss curve", function()
         local png, why = plot(v.log, unit_of(run.data))
         if png == nil then error(why, 0) end
         say("loss curve: " .. png)
      end)
   end
   if v.save_params then
      local tensors = ddp:params_on(0) -- collective at ZeRO-3
      if run.ep then lw.ep.gather_experts(ddp, run.ep, tensors) end -- every expert on rank 0
      recipe_tp.full_tensors(run, tensors) -- with --tp, the full tensors on rank 0
      if comm.rank == 0 then
         attempt("--save-params", function()
            -- beside it first, then renamed: a kill mid-write leaves the previous file whole
            local tmp = v.save_params .. ".tmp"
            local written, why = pcall(safetensors.write, tmp, tensors,
               { { weights.SETTINGS_KEY, json.encode(model_settings(v)) } })
            if not written then
               os.remove(tmp) -- what a full disk let through is no use to anyone
               error(why, 0)
            end
            files.rename(tmp, v.save_params)
            say("parameters: " .. v.save_params)
         end)
      end
   end
   -- at ZeRO-3, over a TP group and under expert parallelism (the experts' all-to-all) a
   -- forward pass is collective: every rank samples (the same text), rank 0 prints
   local collective = v.zero == 3 or v.tp > 1 or v.ep > 1
   if v.sample > 0 and not ended.diverged and (comm.rank == 0 or collective) then
      attempt("sample", function() say(sample_text(run, v)) end)
   end
   for _, problem in ipairs(problems) do say("failed: " .. problem, io.stderr) end
   local status = ended.diverged and recipe.EXIT_DIVERGED
      or ((#problems > 0 or ended.stopped) and 1 or 0)
   return comm:allreduce({ status }, "max")[1]
end

-- The flags' values, or nil after printing --help; a usage error ends the job (EXIT_USAGE).
local function parse_flags(argv, script)
   local v, positional = flags.parse(argv, recipe.flags)
   if v ~= nil and #positional > 0 then
      v, positional = nil, ("unexpected argument '%s'"):format(positional[1])
   end
   if v == nil then
      lw.comm.fail(positional .. " (--help lists the flags)", recipe.EXIT_USAGE)
   end
   if v.help then
      -- under mpirun every rank parses the same flags: the launcher's rank 0 alone prints
      if lw.comm.launched() == 0 then print(usage(script)) end
      return nil
   end
   return v
end

-- A schedule whose warmup outlasts the run never reaches its peak learning rate: said on
-- stderr, even with --quiet, since every step of the run trains slower than the flags suggest.
local function warn_schedule(v, say)
   if v.warmup <= v.steps then return end
   local function given(k, value)
      return ("--%s %s%s"):format(k, value, v.from_preset[k] and (" (--preset %s's)"):format(
         v.preset) or "")
   end
   local last = train.schedule(v.steps, v.steps, v.warmup, 0.1) * v.lr
   say(("warning: %s is longer than the run (%s): the learning rate stops at %.3g, short of its "
      .. "peak %g (lower --warmup or raise --steps)"):format(given("warmup", v.warmup),
      given("steps", v.steps), last, v.lr), io.stderr)
end

-- The world communicator with --timeout (which bounds MPI's start-up too), and say(text [,
-- stream]): a line on rank 0.
local function start_comm(v)
   local comm = lw.comm.init(v.timeout)
   local function say(text, stream)
      if comm.rank ~= 0 then return end
      stream = stream or io.stdout
      stream:write(text, "\n")
      stream:flush()
   end
   return comm, say
end

-- The corpus: --data (a text file, or token shards with --val-data), or the KJV in data/ of the
-- lwopt tree (recipe_paths.default_data); returns it and its path.
local function load_data(v, script)
   if v.data_kind == "tokens" then
      local data = tokens_mod.open(v.data, { vocab = v.vocab, seq_len = v.seq, val = v.val_data,
         hint = (" (the vocabulary is %d%s; --vocab sets it)"):format(v.vocab,
         v.vocab_given and "" or (", --preset %s's"):format(v.preset)) })
      return data, v.data
   end
   local path = v.data or recipe_paths.default_data(script)
   local data = data_mod.load(path, { seq_len = v.seq, hint = v.data == nil and
      ". Prepare the default corpus with `make data` (needs Debian's bible-kjv package)" or "" })
   return data, path
end

-- The GPT, its routing (rules, or all AdamW with --optimizer adamw), buffers and optimizer,
-- the parameters initialised, and the run table train.run takes, the model bound to it.
local function build_run(v, comm, data, rules)
   local moe = { n_expert = v.n_expert, topk = v.topk, aux_coef = v.aux_coef,
      shared_expert = v.shared_expert }
   -- --ep: EP groups of v.ep consecutive ranks (world rank r: group floor(r / ep), EP rank
   -- r % ep, holding experts [r % ep * n/ep, +n/ep)), expert-DP groups of the ranks with the same
   -- EP rank; the model declares its EP rank's experts, lw.ddp.new averages them over the
   -- expert-DP group
   -- every device communicator made from here on (buffers, TP, EP) is of this kind
   lw.comm.set_device_kind(v.device_comm)
   local g = v.ep > 1 and lw.ep.groups(comm, v.ep, v.n_expert) or nil
   -- --tp: TP groups of v.tp consecutive ranks hold the shards of every layer and see the same
   -- batches; the buffers are data-parallel over the DP group (the ranks of one TP rank)
   local tg = recipe_tp.groups(v, comm)
   local cfg = recipe.gpt_config(v.preset, v.vocab, v.seq, moe, v.mlp_hidden)
   cfg.ep, cfg.tp = g or false, tg or false
   local model = lw.nn.GPT.new(cfg)
   if v.optimizer == "adamw" then rules = { { match = ".", optimizer = "adamw" } } end
   local specs = lw.route(model:parameters(), rules) -- errors name an unmatched parameter
   -- expert parameters (in their own buffers) are data-parallel over every rank at --ep 1
   -- (expert_comm nil is comm), over the expert-DP group with --ep
   local ddp = lw.ddp.new(specs, tg and tg.dp_comm or comm, { mode = v.mode,
      expert_comm = g and g.expert_comm,
      algorithm = v.mode == "layerwise" and v.shard == "aligned" and v.layout or nil,
      bucket_size = v.bucket_size, overlap = v.overlap == "on", zero = v.zero, shard = v.shard,
      device = v.device, matmul = v.matmul, param_dtype = v.param_dtype,
      grad_dtype = v.grad_dtype })
   local opt = lw.optim.new(ddp, { lr = v.lr, weight_decay = 0.1, clip = v.clip,
      adamw = { beta1 = 0.9, beta2 = 0.95 }, tp_comm = tg and tg.comm,
      muon = { precision = v.muon_precision, tp_mode = v.muon_tp_mode,
               split_qkv = v.split_qkv == "on" } })
   -- the same values whatever --ep or --tp: drawn over the ep 1, tp 1 model, in its order
   local every = (g or tg) and (function()
      local c1 = recipe.gpt_config(v.preset, v.vocab, v.seq, moe, v.mlp_hidden)
      return lw.nn.GPT.new(c1):parameters()
   end)() or nil
   init_params(model, ddp, v.seed, v.n_layer, every, tg)
   -- full_specs: the whole model's parameters, of which --ep and --tp give each rank a part
   local run = { ep = g, tp = tg, dp_comm = tg and tg.dp_comm, full_specs = every, rules = rules,
      comm = comm, model = model, ddp = ddp, opt = opt, data = data, steps = v.steps,
      batch = v.batch, seq = v.seq, accum = v.accum, seed = v.seed, base_lr = v.lr,
      lr_warmup = v.warmup, lr_min_ratio = 0.1, eval_every = v.eval_every, eval_max = v.eval_max,
      log = v.log, quiet = v.quiet, progress = v.progress, stop_after = v.stop_after,
      max_skips = v.max_skips }
   model:bind(ddp, train.hooks(run))
   return run
end

-- With --ckpt-dir: the run's checkpoint settings, resumed with --resume, and its lineage (the
-- resumed run's, or a new one). Collective.
local function setup_checkpoints(run, v, data, say)
   if not v.ckpt_dir then return end
   run.checkpoint = { dir = v.ckpt_dir, every = v.ckpt_every, keep = v.keep,
      extra = settings(v, run.comm, data) }
   if not (v.resume and resume(run, v, say)) or run.checkpoint.run_id == nil then
      run.checkpoint.run_id = checkpoint.new_run_id(run.comm)
   end
end

-- No output may write over an input or another output: rank 0 compares their real paths (the
-- inputs include the checkpoint resumed), every rank agrees. Collective.
local function check_paths(run, v, data)
   local ok, err = pcall(function()
      if run.comm.rank ~= 0 then return end
      local why = recipe_paths.check(v, data, run.checkpoint and run.checkpoint.resumed_from)
      if why then error(why, 0) end
   end)
   run.comm:agree(ok, err)
end

-- With --init-from: the weights read into the buffers and said in one line, unless the run
-- resumed a checkpoint, whose weights take precedence (also said). Collective.
local function apply_init_from(run, v, say)
   if not v.init_from then return end
   if run.start_step then
      say(("--init-from %s not used: the run resumed from %s, which continues it (--init-from "
         .. "starts a run; a resumed run takes its checkpoint's weights)"):format(v.init_from,
         run.checkpoint.resumed_from))
      return
   end
   say(init_from.load(v.init_from, { ddp = run.ddp, comm = run.comm, full_specs = run.full_specs,
      tp = run.tp, cfg = run.model.cfg, vocab = v.vocab }))
end

-- Where the data comes from: "path (N bytes)", or for token shards "pattern (2 shards, N
-- tokens; validation: val pattern (1 shard, N tokens)); vocabulary 50257 (50304 rows)".
local function data_line(data, v, path)
   if data.kind ~= "tokens" then return ("%s (%d bytes)"):format(path, data.n) end
   local val = data.val_path and ("%s (%s)"):format(data.val_path, data:describe("val"))
      or ("the last %d tokens"):format(data.n_val)
   return ("%s (%s; validation: %s); vocabulary %d (%d rows)"):format(path,
      data:describe("train"), val, v.vocab, v.vocab_rows)
end

-- The model's parameters in words: "0.85M parameters", or with experts "8 experts, top-2 (+ a
-- shared expert), 3.40M parameters, 1.02M active per token" (active: the dense parameters and
-- topk / n_expert of the experts').
function recipe.parameters_text(specs, v)
   local total = lw.arch.numel(specs)
   if (v.n_expert or 0) == 0 then return ("%.2fM parameters"):format(total / 1e6) end
   local experts = {}
   for _, s in ipairs(specs) do
      if s.expert then experts[#experts + 1] = s end
   end
   local expert_numel = lw.arch.numel(experts)
   local active = total - expert_numel + expert_numel * v.topk / v.n_expert
   return ("%d experts, top-%d%s, %.2fM parameters, %.2fM active per token"):format(v.n_expert,
      v.topk, v.shared_expert and " (+ a shared expert)" or "", total / 1e6, active / 1e6)
end

-- How the routing rules split the model's parameters (specs: routed, each with .optimizer):
-- "routing: Muon 24 matrices (85.00M elements), AdamW 50 tensors (39.10M elements)".
function recipe.routing_text(specs)
   local count, numel = { muon = 0, adamw = 0 }, { muon = 0, adamw = 0 }
   for _, s in ipairs(specs) do
      count[s.optimizer] = count[s.optimizer] + 1
      numel[s.optimizer] = numel[s.optimizer] + lw.arch.numel({ s })
   end
   local function part(name, key, one, many)
      return ("%s %d %s (%.2fM elements)"):format(name, count[key],
         count[key] == 1 and one or many, numel[key] / 1e6)
   end
   return ("routing: %s, %s"):format(part("Muon", "muon", "matrix", "matrices"),
      part("AdamW", "adamw", "tensor", "tensors"))
end

-- The line that says what this run trains, where and on what.
local function announce(run, v, data, path, say)
   if v.quiet then return end
   local dp = run.dp_comm or run.comm
   say(("lwopt %s: GPT %d layers x %d, %d heads, %s; %s/%s ZeRO-%d%s on %s, global batch %d x "
      .. "%d %ss; %s"):format(lw.version,
      v.n_layer, v.n_embd, v.n_head, recipe.parameters_text(run.full_specs or run.ddp.specs, v),
      v.optimizer, v.mode, v.zero, v.shard == "rows" and " row-sharded" or "",
      recipe_tp.ranks_text(run), v.batch * v.accum * dp.size, v.seq, unit_of(data),
      data_line(data, v, path)))
   -- the whole model's parameters at any --ep or --tp, routed by the run's rules
   say(recipe.routing_text(run.full_specs and lw.route(run.full_specs, run.rules)
      or run.ddp.specs))
   -- the device the buffers live on, as lw_device_get_info describes it
   local name = ffi.string(C.lib.lw_device_name(run.ddp.device))
   say("device: " .. (lw.device_line(name) or name))
   -- how its buffers move between ranks, and why (ranks sharing one GPU go through the host)
   local dc = run.ddp.device_comm
   if dc and dc.about ~= "" then say("collectives: " .. dc.about) end
   local note = recipe_tp.note(run, v)
   if note then say(note) end
end

-- Trains from the first step to run (1, or the one after the checkpoint resumed) to the last
-- (--steps or --stop-after); a resumed run already past it says so and trains nothing.
local function train_steps(run, v, say)
   local first, last = run.start_step or 1, math.min(v.steps, v.stop_after or v.steps)
   if first > last then
      say(("nothing to train: the checkpoint is at step %d and the run ends at step %d (%s)")
         :format(first - 1, last, last == v.steps and "--steps" or "--stop-after"))
      return {}, { diverged = false }
   end
   return train.run(run)
end

-- Runs the recipe. argv: the script's arguments; rules: routing rules (nil: the defaults, or
-- all AdamW with --optimizer adamw); script: its path, for messages. Returns the step records;
-- a run that must report failure after its work (it diverged, an output failed) ends the
-- process with that status instead (recipe.EXIT_DIVERGED, 1).
function recipe.main(argv, rules, script)
   local started = C.lib.lw_wall_clock()
   local v = parse_flags(argv, script)
   if v == nil then return {} end -- --help
   check_flags(v)
   local comm, say = start_comm(v)
   local bad = lw.ep.check(v.ep, comm.size, v.n_expert) or recipe_tp.check_world(v, comm.size)
   if bad then lw.comm.fail("--" .. bad, recipe.EXIT_USAGE) end
   bad = recipe_batch.plan(v, comm.size / v.tp)
   if bad then lw.comm.fail(bad, recipe.EXIT_USAGE) end
   local lock = check_outputs(comm, v)
   local data, path = load_data(v, script)
   local run = build_run(v, comm, data, rules)
   setup_checkpoints(run, v, data, say)
   check_paths(run, v, data)
   apply_init_from(run, v, say)
   announce(run, v, data, path, say)
   warn_schedule(v, say)
   if v.log then -- collective
      run.log_config = recipe_log.config(run, v, data, path, recipe.flags, started,
         lw.arch.numel(run.full_specs or run.ddp.specs))
   end
   local records, ended = train_steps(run, v, say)
   local status = finish(run, v, records, ended, say)
   if lock then lock.release() end
   if status ~= 0 then lw.comm.exit(status) end
   return records
end

return recipe
