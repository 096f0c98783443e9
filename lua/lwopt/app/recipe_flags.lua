-- recipe_flags.lua: the recipe's flags: the list (names, choices, defaults, help), the exit
-- statuses, parsing with --help and --config (recipe_config.lua), and the checks that refuse
-- values and combinations that cannot work before any work (the schedule's in
-- recipe_schedule.lua); the warnings. Running the recipe is recipe.lua's job.
local lw = require("lwopt")
local flags = require("lwopt.flags")
local tokens_mod = require("lwopt.tokens")
local data_order = require("lwopt.data_order")
local sampling = require("lwopt.sampling")
local tokenizer = require("lwopt.tokenizer")
local C = require("lwopt.C")
local recipe_tp = require("lwopt.app.recipe_tp")
local presets = require("lwopt.presets")
local errors = require("lwopt.errors")
local schedule = require("lwopt.schedule")
local recipe_schedule = require("lwopt.app.recipe_schedule")
local recipe_config = require("lwopt.app.recipe_config")

local recipe_flags = {}

local fail = errors.failer(nil)

-- Choices of the runtime flags, as the C library names them: the modes and shards, and the
-- whole-matrix layouts of the Muon buffers (shard-aligned, and packed); the defaults are the
-- library's.
local lib = C.lib
local RUNTIME, LAYOUT = lib.lw_runtime_defaults(), lib.lw_layout_defaults()
-- Newton-Schulz's named coefficient sets (a list of its own is lw.optim's, not a flag's).
local COEFFICIENT_SETS = {}
for _, name in ipairs(C.names("ns_coeffs")) do
   if name ~= "custom" then COEFFICIENT_SETS[#COEFFICIENT_SETS + 1] = name end
end
local ALIGNED = {}
for _, a in ipairs({ lib.LW_ALGORITHM_COST, lib.LW_ALGORITHM_LPT,
   lib.LW_ALGORITHM_SIZE_MATCHING, lib.LW_ALGORITHM_PACKED }) do
   ALIGNED[#ALIGNED + 1] = C.name("algorithm", a)
end

-- A flag that reaches an option of the library names it: ddp = "zero" (lw.ddp.new's options),
-- optim = "muon.precision" (lw.optim.new's, a dot into its nested tables), and
-- recipe_flags.options gives them their values, so that such a flag is one entry here. The
-- library takes a C option struct's fields by their C names (lwopt.options), so a new field
-- needs no Lua but this entry.
recipe_flags.list = {
   { "preset", presets.NAMES, "small",
     "model and schedule size (moe: 4 layers x 128, 8 experts, top-2); a recipe may add its "
     .. "own" },
   { "config", "string", nil, "a Lua file returning a table of flag values ({ n_layer = 4, lr = "
     .. "1e-3 }), or a --log whose configuration record is read back; flags given override it" },
   { "arch", lw.models.names(), "gpt", "the model (lw.models): GPT-2's architecture, LLaMA's "
     .. "(RMSNorm, rotary positions, grouped-query attention, SwiGLU, untied head), or "
     .. "nanochat's (LLaMA's with ReLU^2, QK norm, value embeddings, residual scalars; its "
     .. "optimizer groups and learning rates), or one a models file registers (--models)" },
   require("lwopt.app.cli_models").FLAG,
   { "n-kv-head", "int", nil, "--arch llama or nanochat: KV heads, dividing --n-head (default: "
     .. "the preset's with its --n-head, else --n-head)", min = 1 },
   { "rope-pairing", { "halves", "interleaved" }, nil, "--arch llama: the rotary pairs, (i, i + "
     .. "head_dim/2) as Hugging Face's LLaMA or (2i, 2i + 1) as Meta's original (default halves)" },
   { "n-layer", "int", nil, "transformer blocks (default: the preset's)", min = 1, max = 65536 },
   { "n-head", "int", nil, "attention heads, a divisor of --n-embd (default: the preset's)",
     min = 1, max = 65536 },
   { "n-embd", "int", nil, "the model's width (default: the preset's)", min = 1, max = 2 ^ 20 },
   { "steps", "int", nil, "optimizer steps (preset's by default)", min = 1, max = 1e9 },
   { "optimizer", { "muon", "adamw", "normuon" }, "muon",
     "muon for matrices + adamw, adamw for all, or normuon where muon would be + adamw" },
   { "mode", C.names("mode"), C.name("mode", RUNTIME.mode), "how the optimizer is split",
     ddp = "mode" },
   { "layout", ALIGNED, C.name("algorithm", LAYOUT.algorithm), "layout of the Muon buffers" },
   { "zero", "int", RUNTIME.zero, "1: shard optimizer state; 2: and gradients; 3: and parameters",
     min = 1, max = 3, ddp = "zero" },
   { "shard", C.names("shard"), C.name("shard", RUNTIME.shard), "aligned: each rank owns whole "
     .. "matrices; rows: every matrix split by rows (row-sharded FSDP, for comparison; needs "
     .. "--zero 3)", ddp = "shard" },
   { "overlap", { "on", "off" }, "on", "overlap communication with backward and forward",
     ddp = "overlap" },
   { "matmul", C.names("matmul"), "fp32", "the model's matrix products on a GPU: exact fp32; "
     .. "tf32 tensor cores; or bf16 tensor cores: bf16 operands, fp32 accumulation, as autocast "
     .. "(weights as the parameters are stored, activations as --activations says). The CPU "
     .. "computes fp32 whatever is asked", ddp = "matmul" },
   { "activations", { "fp32", "bf16" }, nil, "what the activations that only feed matrix "
     .. "products are kept in: the layer norms', the attention's and GELU's outputs, which the "
     .. "linear layers read (bf16 halves their memory and spares the bf16 GEMMs their rounding; "
     .. "the residual stream and the gradients stay fp32) (default: bf16 with --matmul bf16 on a "
     .. "GPU, else fp32)" },
   { "recompute-gelu", { "on", "off" }, nil, "compute the MLPs' GELU output again in backward "
     .. "instead of keeping it: one [tokens, 4 x channels] activation less per layer, one more "
     .. "element-wise pass (default: on on a GPU, off on the CPU)" },
   { "param-dtype", { "bf16", "fp32" }, nil, "what the parameter buffers hold and the all-gathers "
     .. "move: bf16 (the optimizer keeps fp32 master weights of what each rank updates; the "
     .. "model's matrix kernels read the bf16 weights as stored) or fp32 (default: bf16 on a GPU, "
     .. "fp32 on the CPU)", ddp = "param_dtype" },
   { "grad-dtype", { "fp32", "bf16" }, "fp32", "what the gradient buffers hold and the "
     .. "reduce-scatters move", ddp = "grad_dtype" },
   { "n-expert", "int", nil, "experts per layer: every MLP becomes a mixture of experts of the "
     .. "model's activation (--arch llama: SwiGLU) (default: the preset's; none but --preset moe's "
     .. "8; 0: a dense MLP, also with --preset moe)",
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
     .. "shard alone: no communication, a different optimizer) (default duplicated)",
     optim = "muon.tp_mode" },
   { "split-qkv", { "on", "off" }, "on", "Muon orthogonalises the fused attention weight's Q, K "
     .. "and V blocks separately (as Megatron does)", optim = "muon.split_qkv" },
   { "muon-precision", C.names("ns_precision"), nil, "arithmetic of Newton-Schulz on a GPU "
     .. "(default: the library's, bf16; the CPU computes fp32 whatever is asked)",
     optim = "muon.precision" },
   { "muon-variant", { "default", "nanochat" }, "default", "Muon's options as a preset: default "
     .. "(the library's) or nanochat (nanochat's Muon step: its Polar Express coefficients and "
     .. "normalisation, row equilibration, renormalisation, the shape_scaling scale, cautious "
     .. "weight decay at the step's scale; the --muon-* flags below override it)",
     optim = "muon.variant" },
   { "muon-coefficients", COEFFICIENT_SETS, nil, "Newton-Schulz's coefficient set (default: the "
     .. "variant's; the library's quintic)", optim = "muon.coefficients" },
   { "muon-row-equilibrate", { "on", "off" }, nil, "scale each row of Muon's update to the "
     .. "matrix's root-mean-square row norm before Newton-Schulz (MuonEq)",
     optim = "muon.row_equilibrate" },
   { "muon-renormalize", { "on", "off" }, nil, "scale Muon's orthogonalised update to Frobenius "
     .. "norm sqrt(min(rows, cols)) (Muon+)", optim = "muon.renormalize" },
   { "muon-cautious-wd", { "on", "off" }, nil, "decay a Muon matrix's weights only where the "
     .. "update and the weight agree in sign", optim = "muon.cautious_wd" },
   { "muon-weight-decay-mode", C.names("weight_decay"), nil, "Muon's weight decay: decoupled "
     .. "(lr wd W), independent (wd W), l2 (wd W added to the gradient), scaled (lr scale wd W, "
     .. "the step's scale too)", optim = "muon.weight_decay_mode" },
   { "muon-scale", C.names("muon_scale"), nil, "the scale of Muon's step from a matrix's shape "
     .. "(default: the variant's; the library's moonlight)", optim = "muon.scale" },
   { "device", "string", "cpu", "where to train: cpu; cuda (under mpirun, each rank's own GPU, "
     .. "by its place on its machine); cuda:N (that GPU, for every rank: ranks sharing one GPU "
     .. "exchange its buffers through host memory)", ddp = "device" },
   { "device-comm", C.names("device_comm"), "auto", "how ranks exchange GPU buffers: nccl (a GPU "
     .. "per rank), staged (copied through host memory and moved by MPI: ranks sharing a GPU, "
     .. "a build without NCCL; slower), auto (nccl where every rank has its own GPU, else "
     .. "staged)" },
   { "batch", "int", nil, "sequences per rank per micro-step", min = 1, max = 1e6 },
   { "seq", "int", nil, "sequence length (nanoGPT's block_size; default: the preset's)", min = 1,
     max = 1e6 },
   { "accum", "int", nil, "micro-steps per optimizer step (default 1, or what --global-batch "
     .. "makes it; a resume keeps the checkpoint's global batch by changing it)", min = 1,
     max = 1e6 },
   { "global-batch", "int", nil, "sequences per optimizer step over all ranks (--batch x "
     .. "--accum x data-parallel ranks, as Megatron's --global-batch-size): sets --accum",
     min = 1, max = 1e12 },
   { "seed", "int", 1337, "seed of initialisation and data order", min = 0 },
   { "lr", "number", nil, "peak learning rate of the matrices Muon (or NorMuon) updates "
     .. "(default: the preset's)", above = 0, optim = "muon.lr" },
   { "adamw-lr", "number", nil, "peak learning rate of the parameters AdamW updates: all of them "
     .. "with --optimizer adamw (default: the preset's AdamW lr)", above = 0, optim = "lr" },
   { "embedding-lr", "number", nil, "peak learning rate of the embeddings (the tied token "
     .. "embedding is also the LM head) on AdamW (default: --adamw-lr; --arch nanochat: its "
     .. "token embedding's, 0.2, half of it for the value embeddings)", above = 0 },
   { "scalar-lr", "number", nil, "peak learning rate of the gains and biases on AdamW (default: "
     .. "--adamw-lr; --arch nanochat: its x0 scalars', 0.5, a hundredth of it for the residual "
     .. "scalars)", above = 0 },
   { "weight-decay", "number", 0.1, "weight decay of the matrices (AdamW's embeddings, gains and "
     .. "biases have none)", min = 0, optim = "weight_decay" },
   { "adamw-weight-decay", "number", nil, "AdamW's weight decay of the matrices it updates "
     .. "(default: --weight-decay)", min = 0, optim = "adamw.weight_decay" },
   { "adamw-beta1", "number", 0.9, "AdamW's first-moment decay", min = 0, max = 0.999999,
     optim = "adamw.beta1" },
   { "adamw-beta2", "number", 0.95, "AdamW's second-moment decay", min = 0, max = 0.999999,
     optim = "adamw.beta2" },
   { "adamw-eps", "number", nil, "AdamW's epsilon (default: the library's, 1e-8)", above = 0,
     optim = "adamw.eps" },
   { "muon-momentum", "number", nil, "Muon's momentum (default: the variant's; 0.95)", min = 0,
     max = 0.999999, optim = "muon.momentum" },
   { "muon-nesterov", { "on", "off" }, nil, "Nesterov momentum in Muon (default: the variant's; "
     .. "on)", optim = "muon.nesterov" },
   { "muon-ns-steps", "int", nil, "Newton-Schulz iterations (default: the variant's; 5)", min = 1,
     max = 100, optim = "muon.ns_steps" },
   { "schedule", schedule.KINDS, nil, "the learning rate after the warmup: cosine down to the "
     .. "floor at the last step, linear down to it, constant, or wsd (warmup-stable-decay: the "
     .. "peak until the last --decay-steps, then linear down to the floor) (default cosine)" },
   { "warmup", "int", nil, "warmup steps, linear from peak / warmup (default: the preset's)",
     min = 0 },
   { "min-lr-ratio", "number", nil, "the floor the schedule decays to, a share of each group's "
     .. "peak (default 0.1)", min = 0, max = 1 },
   { "min-lr", "number", nil, "the floor as a learning rate of --lr's group (--adamw-lr's with "
     .. "--optimizer adamw); the other groups decay to the same share of theirs", min = 0 },
   { "decay-steps", "int", nil, "wsd: the last steps, over which the learning rate decays",
     min = 1 },
   { "decay-fraction", "number", nil, "wsd: the decay's share of --steps (default 0.2)",
     above = 0, max = 1 },
   { "reschedule", "bool", false, "with --resume: plan the schedule again from this run's flags "
     .. "(--steps, --warmup, ...) instead of going on with the checkpoint's" },
   { "clip", "number", 1.0, "gradient norm clip (0: none)", min = 0, optim = "clip" },
   { "qk-clip", "number", nil, "QK-clip (Kimi K2's MuonClip) at this logit: after each step's "
     .. "update, every attention head whose largest pre-softmax logit (q . k / sqrt(head dim)) "
     .. "over the step's batch passed it has its query and key rows (and biases) scaled so that "
     .. "the logit would be this (default: off)", above = 0 },
   { "bucket-size", "size", nil, "bucket size in elements (default: one bucket per buffer)",
     min = 1, ddp = "bucket_size" },
   { "eval-every", "int", nil, "steps between validation evaluations (0: only at the end)",
     min = 0 },
   { "eval-max", "int", 64, "validation sequences per evaluation (all: the whole split)",
     min = 1, words = { all = "all" } },
   { "data", "string", nil, "text file (bytes; default: the KJV corpus in data/), or token "
     .. "shards: a .bin path or a pattern (data/fineweb10B/fineweb_train_*.bin)" },
   { "val-data", "string", nil, "validation token shards (default: --data with train -> val in "
     .. "the file name when that matches files, else the last 5% of --data)" },
   { "data-order", data_order.NAMES, "random", "random: each step's sequences are windows at "
     .. "offsets drawn from (--seed, step); sequential: the training data read in order, shard "
     .. "after shard, each token once an epoch, then again from the first shard (llm.c's and "
     .. "nanoGPT's loaders); a checkpoint keeps the position" },
   { "vocab", "int", nil, "token vocabulary of token shards (default: the preset's, 50257: "
     .. "GPT-2's); the model's is it padded to a multiple of 128. Byte data: 256", min = 1,
     max = 2 ^ 31 - 1 },
   { "log", "string", nil, "JSON lines per step; the loss curve PNG goes next to it (a non-empty "
     .. "file is refused without --overwrite or --resume)" },
   { "save-params", "string", nil, "write the final parameters as safetensors" },
   { "init-from", "string", nil, "start from the weights in this safetensors file (--save-params, "
     .. "a checkpoint's model.safetensors, or an `lwopt export` in hf-gpt2, nanogpt, hf-llama or "
     .. "nanochat names; F32, BF16 or F16) instead of the seeded initialisation, with a fresh "
     .. "optimizer; another program's file gives the model's shape (a shape flag that "
     .. "contradicts it is refused); a --resume that finds a checkpoint takes the checkpoint's "
     .. "weights instead" },
   { "ckpt-dir", "string", nil, "save checkpoints into this directory" },
   { "ckpt-every", "int", 0, "steps between checkpoints (0: only at the end)", min = 0 },
   { "keep", "int", nil, "checkpoints of this run kept, the newest (default 3)", min = 1 },
   { "keep-best", "bool", false, "also save the checkpoint of each validation loss below every "
     .. "one before, which --ckpt-dir's `best` file names and no --keep removes" },
   { "resume", { "auto", "strict" }, nil, "continue from the checkpoint latest names in "
     .. "--ckpt-dir, if any; when it is missing or damaged, from the newest whole checkpoint of "
     .. "the same run (auto, the default), or not at all (strict)", bare = "auto" },
   { "overwrite", "bool", false, "start a new run in a --ckpt-dir that holds checkpoints "
     .. "(replaced step by step as the new run saves) or over a non-empty --log (without this "
     .. "flag, or --resume for the log, either is refused)" },
   { "stop-after", "int", nil, "stop after this step (checkpointed with --ckpt-dir); the "
     .. "schedule still spans --steps", min = 1 },
   { "max-skips", "int", 10, "stop after this many steps in a row skipped for non-finite "
     .. "gradients (0: never stop)", min = 0 },
   { "timeout", "number", nil, "seconds a collective may wait for the other ranks before the "
     .. "job ends (default: LWOPT_TIMEOUT, else 600; 0: wait forever); also how long a job "
     .. "asked to stop (SIGTERM, SIGUSR1, Ctrl-C) may take to reach its step's end and save",
     min = 0 },
   { "sample", "int", sampling.COUNT, "characters (token data: tokens) to generate at the end "
     .. "(0: none)", min = 0, max = 1e6 },
   { "peak-tflops", "number", nil, "the peak TFLOP/s of each rank's device, for the model FLOPs "
     .. "utilisation (mfu) in the progress line and log (default: the GPU's dense bf16 peak "
     .. "where lwopt knows it; none on a CPU)", above = 0 },
   { "sample-every", "int", 0, "steps between samples during training, printed and written "
     .. "into the log's step records (sample; --sample characters each; 0: only at the end)",
     min = 0 },
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

-- The options the flags that name one (ddp = ..., optim = ...) give lw.ddp.new (target
-- "ddp") or lw.optim.new ("optim"), from the checked flags v, set over base (the run's own
-- values; a new table when nil): each under its option's path, an on/off flag as true/false; a
-- flag without a value leaves the library's default.
function recipe_flags.options(v, target, base)
   local out = base or {}
   for _, f in ipairs(recipe_flags.list) do
      local path = f[target]
      local value = path and v[(f[1]:gsub("-", "_"))]
      if value ~= nil then
         local choices = type(f[2]) == "table" and table.concat(f[2], "|")
         if choices == "on|off" or choices == "off|on" then value = value == "on" end
         local t, key = out, path
         local head, rest = key:match("^([^.]+)%.(.+)$")
         while head do
            t[head] = t[head] or {}
            t, key = t[head], rest
            head, rest = key:match("^([^.]+)%.(.+)$")
         end
         t[key] = value
      end
   end
   return out
end

-- Exit statuses besides 0 and 1 (an error): usage errors, a run stopped by divergence, a run
-- stopped on a signal at a step boundary (SIGTERM, SIGUSR1: sysexits' EX_TEMPFAIL, "try again",
-- which a job script can requeue on; SIGINT: 128 + 2, as a shell reports Ctrl-C).
recipe_flags.EXIT_USAGE = 2
recipe_flags.EXIT_DIVERGED = 3
recipe_flags.EXIT_STOPPED = 75
recipe_flags.EXIT_INTERRUPTED = 130

local function usage(script, list)
   return ("usage: [mpirun -np N] luajit %s [flags]\n"):format(script)
      .. flags.usage(list or recipe_flags.list)
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
         fail("--vocab %d: a text file is read as bytes, a vocabulary of 256 (--vocab is for "
            .. "token shards: a .bin path or a pattern in --data)", v.vocab)
      end
      if v.val_data then
         fail("--val-data is for token shards (a .bin path or a pattern in --data); a text "
            .. "file's validation split is its last 5%%")
      end
      if v.prompt == "" then
         fail("--prompt: the sample needs a prompt of one byte or more")
      end
      for _, name in ipairs({ "prompt_ids", "tokenizer" }) do
         if v[name] then
            fail("--%s is for token shards (a .bin path or a pattern in --data); a text file's "
               .. "sample is its bytes, its prompt --prompt", (name:gsub("_", "-")))
         end
      end
      v.vocab, v.vocab_rows = 256, 256
      return
   end
   v.vocab_given = v.vocab ~= nil
   v.vocab = v.vocab or preset.vocab
   v.vocab_rows = presets.vocab_rows(v.vocab)
   if v.prompt and v.prompt_ids then
      fail("--prompt and --prompt-ids both give the prompt: choose one")
   end
   if v.prompt then
      local ok, ids = pcall(sampling.parse_ids, v.prompt, v.vocab, "--prompt")
      if not ok then
         fail("%s (with token shards --prompt is token ids: text cannot be encoded into "
            .. "tokens, a tokenizer file holds no BPE merges)", tostring(ids))
      end
      v.prompt_ids = ids
   elseif v.prompt_ids then
      v.prompt_ids = sampling.parse_ids(v.prompt_ids, v.vocab, "--prompt-ids")
   end
   if v.tokenizer then
      v.tokenizer_read = tokenizer.load(v.tokenizer)
      if v.tokenizer_read.vocab < v.vocab then
         fail("--tokenizer %s has %d tokens, fewer than the vocabulary (%d): another "
            .. "tokenizer?", v.tokenizer, v.tokenizer_read.vocab, v.vocab)
      end
   end
end

-- The experts: --n-expert (or the preset's), --topk, --aux-coef, --shared-expert, refused where
-- they cannot route (the flags' bounds already refuse --n-expert < 2 and --topk < 1). v gains
-- n_expert (0: dense) and, with experts, topk and aux_coef.
local function check_expert_flags(v, preset)
   v.n_expert = v.n_expert or preset.n_expert or 0
   if v.n_expert == 1 then
      fail("--n-expert 1: a mixture of experts needs at least 2 (0: a dense MLP)")
   end
   if v.n_expert == 0 then
      for _, name in ipairs({ "topk", "aux_coef", "shared_expert" }) do
         if v[name] then
            fail("--%s is for a mixture of experts: add --n-expert (or --preset moe)",
               (name:gsub("_", "-")))
         end
      end
      return
   end
   if v.mlp_hidden then
      fail("--mlp-hidden sizes the dense MLP, which a mixture of experts replaces: drop it, or "
         .. "add --n-expert 0")
   end
   v.topk = v.topk or preset.topk or presets.MOE_DEFAULTS.topk
   v.aux_coef = v.aux_coef or preset.aux_coef or presets.MOE_DEFAULTS.aux_coef
   if v.topk > v.n_expert then
      fail("--topk %d is more than the %d experts (--n-expert%s): each token goes to topk "
         .. "distinct experts", v.topk, v.n_expert,
         v.n_expert == preset.n_expert and (", --preset %s's"):format(v.preset) or "")
   end
end

-- Flag values and combinations that cannot work, refused before any work (every rank sees the
-- same flags, so every rank refuses alike). v gains the preset's values where a flag is unset.
local function check_flags(v)
   -- the same choices main gives lw.ddp.new, checked by the library's rules
   local ok, why = lw.ddp.check({ mode = v.mode, zero = v.zero, shard = v.shard,
      algorithm = v.mode == "layerwise" and v.shard == "aligned" and v.layout or nil })
   if not ok then fail("%s", in_flag_words(why)) end
   if v.device ~= "cpu" and v.device ~= "cuda" and not v.device:match("^cuda:%d+$") then
      fail("--device must be cpu, cuda or cuda:N (a GPU's number), got '%s'", v.device)
   end
   if v.device ~= "cpu" and not lw.has_cuda() then
      local _, why = pcall(lw.ddp.device, v.device)
      fail("--device %s: %s; use --device cpu", v.device,
         (tostring(why):gsub("^lw%.ddp%.new: ", "")))
   end
   if v.device == "cpu" and v.device_comm ~= "auto" then
      fail("--device-comm %s is for GPU buffers: add --device cuda (or cuda:N)", v.device_comm)
   end
   -- bf16 parameters where the model's GEMMs run on tensor cores; on the CPU fp32 (bench/)
   v.param_dtype = v.param_dtype or (v.device == "cpu" and "fp32" or "bf16")
   -- GPU memory is the scarcer; on the CPU the pass costs more than the memory is worth
   v.recompute_gelu = v.recompute_gelu or (v.device == "cpu" and "off" or "on")
   -- as autocast keeps them where the matrix products run in bf16
   v.activations = v.activations or ((v.device ~= "cpu" and v.matmul == "bf16") and "bf16"
      or "fp32")
   if not v.ckpt_dir then
      for _, name in ipairs({ "resume", "keep", "ckpt_every", "keep_best" }) do
         if v[name] and v[name] ~= 0 then
            fail("--%s needs --ckpt-dir", (name:gsub("_", "-")))
         end
      end
   end
   if v.n_kv_head and v.arch == "gpt" then
      fail("--n-kv-head is for --arch llama or nanochat (GPT-2's attention has a KV head per "
         .. "head)")
   end
   if v.rope_pairing and v.arch == "gpt" then
      fail("--rope-pairing is for --arch llama (GPT-2's positions are a learned table)")
   end
   if v.overwrite and not v.ckpt_dir and not v.log then
      fail("--overwrite needs --ckpt-dir or --log (what it lets a new run replace)")
   end
   if v.resume and v.overwrite then
      fail("--resume continues the checkpoints in --ckpt-dir and --overwrite replaces them: "
         .. "choose one")
   end
   local preset = (v.presets or presets.presets)[v.preset]
   v.from_preset = {}
   for _, k in ipairs({ "steps", "batch", "seq", "lr", "adamw_lr", "warmup", "eval_every",
      "n_layer", "n_embd", "n_head" }) do
      if v[k] == nil then v[k], v.from_preset[k] = preset[k], true end
   end
   v.keep = v.keep or 3
   -- LLaMA's grouped KV heads: the preset's, for its own heads (presets.lua)
   if v.arch == "llama" and v.n_kv_head == nil and v.from_preset.n_head then
      v.n_kv_head = preset.n_kv_head
   end
   if v.n_embd % v.n_head ~= 0 then
      fail("--n-head %d does not divide the width %d (--n-embd%s)", v.n_head, v.n_embd,
         v.from_preset.n_embd and (", --preset %s's"):format(v.preset) or "")
   end
   -- nanochat's four learning rates where the flags do not give them (app/recipe_nanochat.lua)
   if v.arch == "nanochat" then require("lwopt.app.recipe_nanochat").flag_defaults(v) end
   v.embedding_lr = v.embedding_lr or v.adamw_lr
   v.scalar_lr = v.scalar_lr or v.adamw_lr
   if v.optimizer == "adamw" then
      recipe_schedule.check_flags(v, v.adamw_lr, "--adamw-lr")
   else
      recipe_schedule.check_flags(v, v.lr, "--lr")
   end
   check_expert_flags(v, preset)
   check_data_flags(v, preset)
   recipe_tp.check_flags(v)
   if v.ep > 1 then
      local bad = lw.ep.check(v.ep, v.ep, v.n_expert)
      if bad then fail("--%s", bad) end
   end
end

-- The flag list with a recipe's own presets among --preset's choices (names: every preset's;
-- nil: the library's) and the models registered now among --arch's (loose: any word, for
-- reading a --config before the models files it names are loaded).
local function list_with(names, loose)
   local choices = { preset = names, arch = loose and "string" or lw.models.names() }
   local list = {}
   for i, f in ipairs(recipe_flags.list) do
      if choices[f[1]] then
         local copy = {}
         for k, x in pairs(f) do copy[k] = x end
         copy[2] = choices[f[1]]
         f = copy
      end
      list[i] = f
   end
   return list
end

-- Loads the models files of LWOPT_MODELS and argv's --models (app/cli_models.lua); a bad one
-- ends the job, named.
local function load_models(argv)
   local loaded, why = require("lwopt.app.cli_models").load(argv)
   if not loaded then lw.comm.fail(why, recipe_flags.EXIT_USAGE) end
end

-- The keys of the flags argv gives (a set), parsed against list without its defaults.
local function given_keys(argv, list)
   local bare = {}
   for i, f in ipairs(list) do
      local copy = {}
      for k, x in pairs(f) do copy[k] = x end
      copy[3] = nil
      bare[i] = copy
   end
   local set = {}
   for k in pairs(flags.parse(argv, bare)) do set[k] = true end
   return set
end

-- The flags' values, or nil after printing --help; a usage error ends the job (EXIT_USAGE).
-- own: a recipe's presets (presets.with), nil for none. --config FILE's flags come before
-- argv's, which override them. v.given: the flags argv or the config set; v.presets: every
-- preset; v.flag_list: the list parsed (the log's record lists it).
local function parse_flags(argv, script, own)
   local ok, all, names = pcall(presets.with, own)
   if not ok then lw.comm.fail(tostring(all), recipe_flags.EXIT_USAGE) end
   load_models(argv)
   names = own and names or nil
   local list = list_with(names)
   local v, positional = flags.parse(argv, list_with(names, true))
   if v ~= nil and #positional > 0 then
      v, positional = nil, ("unexpected argument '%s'"):format(positional[1])
   end
   if v ~= nil and v.config and not v.help then
      local read, args = pcall(recipe_config.args, v.config, list_with(names, true))
      if not read then lw.comm.fail(tostring(args), recipe_flags.EXIT_USAGE) end
      for _, a in ipairs(argv) do args[#args + 1] = a end
      argv = args
      -- the config's models files too (a log's record names the run's)
      load_models(argv)
      list = list_with(names)
   end
   if v ~= nil then v, positional = flags.parse(argv, list) end
   if v == nil then
      lw.comm.fail(positional .. " (--help lists the flags)", recipe_flags.EXIT_USAGE)
   end
   if v.help then
      -- under mpirun every rank parses the same flags: the launcher's rank 0 alone prints
      if lw.comm.launched() == 0 then print(usage(script, list)) end
      return nil
   end
   v.given, v.presets, v.flag_list = given_keys(argv, list), all, list
   return v
end

-- Said on stderr (rank 0), even with --quiet: a warmup longer than the run, and --lr given
-- with --optimizer adamw, which puts no parameter on Muon.
local function warn_schedule(v, say)
   recipe_schedule.warn(v, v.optimizer == "adamw" and v.adamw_lr or v.lr, say)
   if v.optimizer == "adamw" and v.given.lr and v.lr ~= v.adamw_lr then
      say(("warning: --lr %g is Muon's learning rate, which --optimizer adamw does not use: "
         .. "AdamW's is --adamw-lr (%g)"):format(v.lr, v.adamw_lr), io.stderr)
   end
end

-- For recipe.lua: the checks, parsing and the warning.
recipe_flags.check, recipe_flags.parse = check_flags, parse_flags
recipe_flags.warn_schedule = warn_schedule

return recipe_flags
