-- cli.lua: the `lwopt` command: layout (print a layout map or JSON), run (a Lua script with
-- lwopt on its path), train (recipes/gpt_small.lua), repl, device (what a device is, or why
-- CUDA cannot be had), version (and --version), export (a checkpoint as Hugging Face GPT-2 or
-- nanoGPT files: cli_export.lua), over training logs plot, compare and csv (cli_logs.lua);
-- after training, sample and eval (cli_sample.lua, cli_eval.lua); your own text: tokenizer
-- (train, encode, decode: cli_tokenizer.lua) and data prepare (token shards: cli_data.lua).
-- main(argv) returns the exit status.
local flags = require("lwopt.flags")
local errors = require("lwopt.errors")

local cli = {}

local USAGE = [[
usage: lwopt <command> [args]

commands:
  layout [flags]      print the layout of a model's parameters (lwopt layout --help)
  run FILE [args]     run a Lua script with lwopt on its path (arg[0] = FILE, arg[1..] = args)
  train [flags]       train a GPT: recipes/gpt_small.lua with these flags (lwopt train --help)
  repl [--models F]   interactive LuaJIT session with `lw` loaded
  device [NAME]       what device NAME (cpu, cuda, cuda:N) is, or why it cannot be had;
                      without NAME the CPU and, if there is one, the GPU
  version             version, library, LuaJIT and whether CUDA is on (--version: one line)
  plot LOG...         several runs' losses on one chart (--out PNG, --x step|tokens, --y
                      loss|max-logit: or their largest attention logits; gnuplot)
  compare LOG...      each run's final figures in a table (--csv: as CSV)
  csv LOG [OUT.csv]   a run's step records as CSV, one row per step
  export CKPT --format hf-gpt2|nanogpt OUT_DIR
                      a trained GPT as Hugging Face GPT-2 or nanoGPT files (lwopt export --help)
  sample PATH [flags] text from a trained model (a checkpoint, or a .safetensors file): the
                      sample its training printed, or another (lwopt sample --help)
  eval PATH --data D  a trained model's validation loss over D (lwopt eval --help)
  tokenizer train|encode|decode
                      a byte-level BPE tokenizer learnt from text files; text to token ids
                      and back (lwopt tokenizer --help)
  data prepare TEXT... --tokenizer T --out DIR
                      text files as token shards for --data (lwopt data --help)
  help                this text

Models of your own: a models file returns entries (lw.models.derive(...)); layout, sample, eval,
export, repl and train take --models FILE (repeatable) or LWOPT_MODELS=a.lua:b.lua to know them.

examples:
  lwopt layout --arch gpt --n-layer 12 --n-embd 768 --n-head 12 --dp 8 --algorithm cost
  lwopt layout --arch gpt --n-layer 48 --n-embd 1600 --n-head 25 --dp 64 --bucket-size 40M \
      --model-step h100-node --tokens 8192       (and the predicted step; --compare: all layouts)
  lwopt layout --arch llama --n-layer 16 --n-embd 2048 --n-head 16 --n-expert 64 \
      --expert-hidden 1024 --dp 64 --expert-dp 8  (any lw.models model, its fields as flags)
  lwopt train --preset tiny                     (seconds; mpirun -np 2 lwopt train: 2 ranks)]]

-- The model fields that change neither a model's parameters nor its modelled step: no layout
-- flag for them.
local NOT_LAYOUT = { recompute_gelu = true, activations = true, aux_coef = true,
   norm_eps = true, rope_base = true, rope_pairing = true, window = true, qk_norm = true,
   window_pattern = true, softcap = true }

-- What a model field's flag says in --help, where the field's name alone does not.
local FIELD_HELP = {
   n_layer = "layers", n_embd = "model width", n_head = "attention heads",
   n_kv_head = "key/value heads (grouped-query attention; default --n-head)",
   vocab = "vocabulary size",
   seq_len = "sequence length (learned positions' table; the modelled attention's with "
      .. "--model-step or --compare)",
   tied = "share the input embedding and the LM head (--untied: off)",
   bias = "linear and norm biases", mlp_hidden = "dense MLP hidden size",
   n_expert = "experts per layer: every MLP a mixture of experts of the model's activation",
   topk = "experts each token is routed to: the experts' share of the modelled compute with "
      .. "--model-step or --compare (default 2)",
   expert_hidden = "expert MLP hidden size", shared_expert = "a shared expert every token takes",
   router_muon = "the router on Muon instead of AdamW", norm = "norm layers",
   norm_gain = "norm gains", position = "positions: a learned table or rotary",
   activation = "MLP (and expert) activation",
   embed_norm = "a norm after the token embedding (its gain with --norm-gain)",
}

-- Flags of the model fields (lw.models) of every registered model, each once, in the models'
-- order: "size" and "count" fields ints, "coef" numbers, "choice" their values, "bool" on|off
-- ("--tied" alone: on); returns the list and the fields by key.
local function model_flags(models)
   local list, by_key = {}, {}
   for _, name in ipairs(models.names()) do
      for _, f in ipairs(models.get(name).fields) do
         local key, kind = f[1], f[2]
         if not by_key[key] and not NOT_LAYOUT[key] and kind ~= "any" then
            local text = FIELD_HELP[key] or key:gsub("_", " ")
            if f[3] ~= nil and key ~= "topk" then text = text .. " (default: the model's)" end
            local flag = { key:gsub("_", "-"), nil, nil, text }
            if kind == "size" or kind == "count" then
               flag[2], flag.min = "int", kind == "size" and 1 or 0
            elseif kind == "coef" then
               flag[2], flag.min = "number", 0
            elseif kind == "choice" then
               flag[2] = f[4]
            elseif kind == "bool" then
               flag[2], flag.bare = { "on", "off" }, "on"
            end
            if flag[2] then
               list[#list + 1] = flag
               by_key[key] = f
            end
         end
      end
   end
   return list, by_key
end

-- Flags the layout command had before every model came from lw.models, and what to use
-- instead: refused with that.
local GONE = {
   fused = "--fused is gone: every model declares its fused weights (attn.qkv; SwiGLU's fc as "
      .. "gate and up rows), and Muon orthogonalises Q, K and V apart unless --split-qkv off",
   ["ffn-hidden"] = "--ffn-hidden is now --mlp-hidden (the model's field)",
}

-- The layout command's flags; the dtype and layout choices are the library's (lw.layout), and
-- the models and their fields the registry's (lw.models), read when the command runs, so that
-- `lwopt help` works without the library. Also the model fields' flags by key.
local function layout_flags()
   local layout = require("lwopt.layout")
   local stepmodel = require("lwopt.planner")
   local models = require("lwopt.models")
   local list = { { "arch", "string", "gpt", "the model (" .. table.concat(models.names(), ", ")
      .. "; --models FILE adds a models file's); a mixture of experts is any of them with "
      .. "--n-expert" }, require("lwopt.app.cli_models").FLAG }
   local fields_list, by_key = model_flags(models)
   for _, f in ipairs(fields_list) do list[#list + 1] = f end
   for _, f in ipairs({
      { "untied", "bool", false, "a separate LM head (--tied off)" },
      { "tp", "int", 1, "tensor-parallel size: the layout of one TP rank's shards (each rank's "
        .. "shapes alike; dense models)", min = 1 },
      { "dtype", layout.dtypes, nil, "parameter dtype" },
      { "dp", "int", 1, "data-parallel size", min = 1 },
      { "expert-dp", "int", nil, "expert data-parallel size (default: dp)", min = 1 },
      { "algorithm", layout.algorithms, layout.defaults.algorithm, "layout of Muon buffers" },
      { "adamw-layout", layout.adamw_layouts, nil,
        "layout of AdamW buffers (default " .. layout.defaults.adamw_layout .. ")" },
      { "bucket-size", "size", nil, "bucket size in elements, e.g. 40M (default: one bucket)",
        min = 1 },
      { "high-busbw", "bool", false, "pad bucket ends to lcm(dp, 128, 65536)" },
      { "json", "bool", false, "print JSON instead of the map" },
      { "stats", "bool", false, "print only the statistics" },
      { "buckets", "bool", false, "the map: every bucket, one row per rank drawn to scale "
        .. "(default: a summary: buffers, the largest buckets, the statistics)" },
      { "ascii", "bool", false, "draw bars with ASCII characters" },
      { "width", "int", 40, "bar width in characters", min = 1 },
      { "model-step", stepmodel.preset_names, nil, "after the layout, the predicted step time "
        .. "on this machine (" .. stepmodel.default_machine .. " when given alone; "
        .. "docs/layout.md, \"Step-time model\")", bare = stepmodel.default_machine },
      { "compare", "bool", false, "instead of the map: every whole-matrix algorithm side by "
        .. "side (padding, bytes, balance, predicted step on the --model-step machine)" },
      { "tokens", "int", 8192, "tokens per rank per step (batch x sequence x micro-steps), for "
        .. "--model-step and --compare", min = 1 },
      { "zero", "int", 1, "ZeRO level the step is modelled at", min = 1, max = 3 },
      { "muon-variant", { "default", "nanochat" }, nil, "Muon's options as the recipe's flag "
        .. "sets them: their passes over every matrix with --model-step and --compare (default: "
        .. "the library's Muon)" },
      { "split-qkv", { "on", "off" }, "on", "Muon orthogonalises a fused QKV weight's Q, K and V "
        .. "as three matrices (the modelled Newton-Schulz, as the recipe's --split-qkv)" },
      { "flops-per-token", "number", nil, "forward + backward FLOPs per token (default: 6 per "
        .. "matrix parameter, plus attention over the model's sequence length)", min = 0 },
      { "machine-set", "string", nil, "change fields of the machine, e.g. "
        .. "model_flops=5e14,intra.bandwidth=3e11,variable=ring" },
      { "help", "bool", false, "this text" },
   }) do list[#list + 1] = f end
   return list, by_key
end

-- The layout options lw.layout.compute names in its messages, and the declaration's, besides
-- the model's fields.
local LAYOUT_FIELDS = { "dp", "expert_dp", "bucket_size", "algorithm", "adamw_layout", "tp",
   "dtype" }

-- A message of lw.models or lw.layout in the words of the command line: the caller's position
-- and the function's name dropped, each field named by its flag ("n_embd (65) must be
-- divisible by n_head (2)" reads "--n-embd (65) must be divisible by --n-head (2)").
local function in_flag_words(message, model_fields)
   message = tostring(message):gsub("^%S+%.lua:%d+: ", ""):gsub("^lw%.[%w_.]+: ", "")
      :gsub("^layout: ", "")
   local keys = {}
   for key in pairs(model_fields) do keys[#keys + 1] = key end
   for _, key in ipairs(LAYOUT_FIELDS) do keys[#keys + 1] = key end
   -- longer keys first, so that n_head is not replaced inside n_kv_head's flag
   table.sort(keys, function(a, b) return #a > #b or (#a == #b and a < b) end)
   for _, field in ipairs(keys) do
      local flag = "--" .. field:gsub("_", "-")
      message = message:gsub("'" .. field .. "'", flag)
         :gsub("%f[%w_]" .. field .. "%f[^%w_]", flag)
   end
   return message
end

-- A usage error: one line naming the problem and where the flags are listed; status 2.
local function usage_error(out, msg, help)
   out:write("lwopt: ", msg, " (", help, " lists them)\n")
   return 2
end

-- The machine of --model-step (default the step model's) with --machine-set's fields changed:
-- "a=1,b.c=2,variable=ring" (numbers where they read as numbers).
local function machine_of(stepmodel, v)
   local name = v.model_step or stepmodel.default_machine
   if v.machine_set == nil then return name end
   local m = stepmodel.machine(name)
   for item in v.machine_set:gmatch("[^,]+") do
      local key, value = item:match("^%s*([%w_%.]+)%s*=%s*(.-)%s*$")
      if key == nil or value == "" then
         errors.fail("--machine-set", "'%s' is not field=value", item)
      end
      local target, field = m, key
      local head, rest = key:match("^([%w_]+)%.([%w_]+)$")
      if head then
         if type(m[head]) ~= "table" then m[head] = {} end
         target, field = m[head], rest
      end
      target[field] = tonumber(value) or value
   end
   m.name = name .. " (changed)"
   return m
end

-- lw.stepmodel.predict's options from the layout command's flags and the model's config c
-- (its defaults filled): FLOPs per token from --flops-per-token, else 6 per matrix parameter
-- (an expert's at topk over its layer's experts) plus attention (n_layer x n_embd x the
-- model's seq_len); Muon's variant and split_qkv as the recipe's flags set them.
local function step_options(lw, v, c, specs)
   local attention = { n_layer = c.n_layer, n_embd = c.n_embd, seq_len = c.seq_len }
   local muon = { split_qkv = v.split_qkv == "on" }
   if v.muon_variant then muon.variant = v.muon_variant end
   return { tokens = v.tokens, zero = v.zero, machine = machine_of(lw.stepmodel, v),
            topk = c.topk, muon = muon,
            model = v.flops_per_token or lw.stepmodel.flops_per_token(specs, attention, c.topk) }
end

-- The model's fields from the flags given (only those: the model fills its defaults), or nil
-- and the message of a flag the model does not have.
local function model_config(v, arch, by_key, models)
   local own = {}
   for _, f in ipairs(models.get(arch).fields) do own[f[1]] = true end
   local config = {}
   for key, f in pairs(by_key) do
      local value = v[key]
      if value ~= nil then
         if not own[key] then
            return nil, ("--%s is not a field of --arch %s"):format(key:gsub("_", "-"), arch)
         end
         if f[2] == "bool" then value = value == "on" end
         config[key] = value
      end
   end
   if v.untied then config.tied = false end
   return config
end

local function layout_command(argv, out, err)
   local help = "lwopt layout --help"
   for _, a in ipairs(argv) do
      local name = a:match("^%-%-([%w%-]+)")
      if name and GONE[name] then return usage_error(err, GONE[name], help) end
   end
   local list, by_key = layout_flags()
   local usage = "usage: lwopt layout [flags]\n" .. flags.usage(list)
   local v, positional = flags.parse(argv, list)
   if v == nil then return usage_error(err, positional, help) end
   if v.help then
      out:write(usage, "\n")
      return 0
   end
   if #positional > 0 then
      return usage_error(err, "unexpected argument '" .. positional[1] .. "'", help)
   end
   if v.tied == "on" and v.untied then
      return usage_error(err, "--tied and --untied exclude each other", help)
   end
   local lw = require("lwopt")
   local names = lw.models.names()
   local known = false
   for _, name in ipairs(names) do known = known or name == v.arch end
   if v.arch == "moe" then
      return usage_error(err, "--arch moe is not a model: a mixture of experts is a model with "
         .. "--n-expert N, e.g. --arch llama --n-expert 8 --expert-hidden H (LLaMA's, SwiGLU "
         .. "experts) or --arch gpt --n-expert 8 (GPT-2's, GELU experts)", help)
   elseif not known then
      return usage_error(err, ("--arch %s is not a model (%s; a models file's: --models FILE)")
         :format(v.arch, table.concat(names, ", ")), help)
   end
   local config, bad = model_config(v, v.arch, by_key, lw.models)
   if config == nil then return usage_error(err, bad, help) end
   if v.compare and (v.json or v.stats) then
      return usage_error(err, "--compare prints its own table, not --json or --stats", help)
   end
   if v.model_step and v.json then
      return usage_error(err, "--model-step prints a table after the map, not after --json", help)
   end
   local modelled = v.model_step or v.compare
   local ok, result, extra = pcall(function()
      local c = lw.models.config(v.arch, config)
      local declared = {}
      for k, x in pairs(config) do declared[k] = x end
      declared.dtype, declared.tp, declared.tp_rank = v.dtype, v.tp, 0
      local specs = lw.models.specs(v.arch, declared)
      local layout_opts = { dp = v.dp, expert_dp = v.expert_dp, bucket_size = v.bucket_size,
         algorithm = v.algorithm, adamw_layout = v.adamw_layout, high_busbw = v.high_busbw }
      local predict_opts = modelled and step_options(lw, v, c, specs)
      if v.compare then
         return nil, lw.stepmodel.compare(specs, layout_opts, predict_opts)
      end
      local l = lw.layout.compute(specs, layout_opts)
      return l, v.model_step and lw.stepmodel.predict(l, predict_opts)
   end)
   if not ok then
      local message = in_flag_words(result, by_key)
      -- a flag the model needs and was not given is a usage error like an unknown one
      local missing = message:match("^missing required field (%-%-[%w%-]+)$")
      if missing then
         return usage_error(err, ("--arch %s needs %s"):format(v.arch, missing), help)
      end
      err:write("lwopt layout: ", message, "\n")
      return 1
   end
   if v.compare then
      out:write(lw.stepmodel.compare_table(extra), "\n")
      return 0
   end
   if v.json then
      out:write(result:json("  "), "\n")
   elseif v.stats then
      local text = result:summary()
      out:write(text:match("\n(stats\n.*)$"), "\n")
   elseif v.buckets then
      out:write(result:show{ ascii = v.ascii, width = v.width }, "\n")
   else
      out:write(result:summary{ more = "--buckets draws each, rank by rank" }, "\n")
   end
   if extra then out:write("\n", lw.stepmodel.table(extra), "\n") end
   return 0
end

local function run_command(argv, _, err)
   local file = argv[1]
   if file == nil then return usage_error(err, "run needs a FILE", "lwopt help") end
   local chunk, load_err = loadfile(file)
   if chunk == nil then
      err:write("lwopt run: ", load_err, "\n")
      return 1
   end
   local script_arg = { [0] = file }
   for i = 2, #argv do script_arg[i - 1] = argv[i] end
   _G.arg = script_arg
   local ok, result = xpcall(function() return chunk(unpack(script_arg)) end, function(e)
      -- Ctrl-C goes on to bin/lwopt, which says it in one line
      if tostring(e):match("interrupted!$") then return e end
      return debug.traceback(e, 2)
   end)
   if not ok and tostring(result):match("interrupted!$") then errors.raise(result) end
   if not ok then
      err:write(tostring(result), "\n")
      return 1
   end
   return type(result) == "number" and result or 0
end

-- The lines `lwopt device` prints for a device (lw.device_info's table).
local function device_lines(d)
   local gib = function(bytes) return ("%.1f GiB"):format(bytes / 2 ^ 30) end
   local gpu = d.capability > 0
   return table.concat({
      ("device      %s"):format(d.device),
      ("name        %s"):format(d.name),
      ("memory      %s total, %s free"):format(gib(d.total_bytes), gib(d.free_bytes)),
      ("capability  %s"):format(gpu and ("sm_%d"):format(d.capability) or "-"),
      ("processors  %d %s"):format(d.processors, gpu and "SMs" or "cores"),
      ("software    %s"):format(d.software ~= "" and d.software or "-"),
      ("id          %s"):format(d.id ~= "" and d.id or "-"),
   }, "\n") .. "\n"
end

-- lwopt device [NAME]: NAME's info, status 1 with the reason when it cannot be had; without
-- NAME the CPU's, then the GPU's or why there is none (status 0: a CPU-only machine is fine).
local function device_command(argv, out, err)
   if #argv > 1 then return usage_error(err, "device takes at most one NAME", "lwopt help") end
   local lw = require("lwopt")
   local names = argv[1] and { argv[1] } or { "cpu", "cuda" }
   for i, name in ipairs(names) do
      local d, why = lw.device_info(name)
      if i > 1 then out:write("\n") end
      if d then
         out:write(device_lines(d))
      elseif argv[1] then
         err:write("lwopt device: ", name, ": ", why, "\n")
         return 1
      else
         out:write(("device      %s\nunavailable %s\n"):format(name, why))
      end
   end
   return 0
end

-- lwopt train [flags]: recipes/gpt_small.lua of the lwopt tree these modules came from, run
-- with the flags as `luajit recipes/gpt_small.lua [flags]` would (under mpirun too).
local function train_command(argv, out, err)
   local tree = require("lwopt.app.recipe_paths").tree()
   local recipe = tree and tree .. "/recipes/gpt_small.lua"
   local f = recipe and io.open(recipe, "r")
   if f == nil then
      err:write("lwopt train: recipes/gpt_small.lua is not here (", recipe or "lwopt is installed "
         .. "without its recipes", "); run it from a checkout of lwopt\n")
      return 1
   end
   f:close()
   return run_command({ recipe, unpack(argv) }, out, err)
end

-- lwopt version: what is running and whether CUDA is on, or why it is off, in the words of
-- `lwopt device`; --version: the first line alone, as one-binary tools print it.
local function version_command(argv, out, err, short)
   if #argv > 0 then return usage_error(err, "version takes no arguments", "lwopt help") end
   local ok, lw = pcall(require, "lwopt")
   if not ok then
      err:write(tostring(lw), "\n")
      return 1
   end
   out:write(("lwopt %s\n"):format(lw.version))
   if short then return 0 end
   local cuda, why = lw.device_line("cuda")
   if cuda == nil then
      -- "device: CUDA is not available: no usable NVIDIA driver (libcuda.so is ...)" reads
      -- "off (no usable NVIDIA driver: libcuda.so is ...)"
      why = tostring(why):gsub("^device: ", ""):gsub("^CUDA is not available: ", "")
         :gsub("^([^(]-) %((.*)%)$", "%1: %2")
   end
   out:write(("library: %s\nluajit: %s\ncuda: %s\n"):format(lw.library, jit.version,
      cuda and "on (" .. cuda .. ")" or "off (" .. why .. ")"))
   return 0
end

-- lwopt repl [--models FILE]...: the session, with those models registered.
local function repl_command(argv, out, err)
   local list = { require("lwopt.app.cli_models").FLAG, { "help", "bool", false, "this text" } }
   local v, positional = flags.parse(argv, list)
   if v == nil then return usage_error(err, positional, "lwopt repl --help") end
   if #positional > 0 then
      return usage_error(err, "unexpected argument '" .. positional[1] .. "'", "lwopt repl --help")
   end
   if v.help then
      out:write("usage: lwopt repl [--models FILE]...\n", flags.usage(list), "\n")
      return 0
   end
   return require("lwopt.app.repl").run{ lw = require("lwopt") }
end

-- The commands whose flags and work need the library (its dtypes, layouts, kernels); the log
-- readers (plot, compare, csv) and `run` (a script of the user's) do not.
local NEEDS_LIBRARY = { layout = true, device = true, export = true, repl = true, sample = true,
   eval = true, train = true, version = true, ["--version"] = true, tokenizer = true,
   data = true }

-- The commands that open or name a model: --models FILE and LWOPT_MODELS load models files.
local TAKES_MODELS = { layout = true, export = true, repl = true, sample = true, eval = true }

function cli.main(argv, out, err)
   out, err = out or io.stdout, err or io.stderr
   local command = argv[1]
   local rest = { unpack(argv, 2) }
   if command == nil or command == "help" or command == "--help" or command == "-h" then
      out:write(USAGE, "\n")
      return command == nil and 2 or 0
   end
   -- before the library is built: one line that says so (for --help too), not a traceback
   if NEEDS_LIBRARY[command] then
      local loaded, why = pcall(require, "lwopt.C")
      if not loaded then
         err:write(tostring(why), "\n")
         return 1
      end
   end
   -- the models files before the command's flags: their models are then --arch's choices, and
   -- a checkpoint of one of them can be opened
   if TAKES_MODELS[command] then
      local loaded, why = require("lwopt.app.cli_models").load(rest)
      if not loaded then
         err:write("lwopt ", command, ": ", why, "\n")
         return 1
      end
   end
   if command == "layout" then
      return layout_command(rest, out, err)
   elseif command == "run" then
      return run_command(rest, out, err)
   elseif command == "device" then
      return device_command(rest, out, err)
   elseif command == "plot" then
      return require("lwopt.app.cli_logs").main("plot", rest, out, err)
   elseif command == "compare" then
      return require("lwopt.app.cli_logs").main("compare", rest, out, err)
   elseif command == "csv" then
      return require("lwopt.app.cli_logs").main("csv", rest, out, err)
   elseif command == "export" then
      return require("lwopt.app.cli_export").main(rest, out, err)
   elseif command == "repl" then
      return repl_command(rest, out, err)
   elseif command == "sample" then
      return require("lwopt.app.cli_sample").main(rest, out, err)
   elseif command == "eval" then
      return require("lwopt.app.cli_eval").main(rest, out, err)
   elseif command == "tokenizer" then
      return require("lwopt.app.cli_tokenizer").main(rest, out, err)
   elseif command == "data" then
      return require("lwopt.app.cli_data").main(rest, out, err)
   elseif command == "train" then
      return train_command(rest, out, err)
   elseif command == "version" or command == "--version" then
      return version_command(rest, out, err, command == "--version")
   end
   return usage_error(err, "unknown command '" .. tostring(command) .. "'", "lwopt help")
end

return cli
