-- cli_export_spec.lua: `lwopt export` (app/cli_export.lua over lua/lwopt/export.lua): every
-- tensor of an hf-gpt2 and a nanogpt export read back and compared with the checkpoint's, the
-- transposes and the vocabulary's padding undone by a mapping written here; config.json; what
-- CKPT may name; the errors, each one line. tests/export/run.sh checks the same with numpy and a
-- forward pass.
local ffi = require("ffi")
local lw = require("lwopt")
local cli = require("lwopt.app.cli")
local json = require("lwopt.json")
local safetensors = require("lwopt.safetensors")
local helpers = require("helpers")

local function run(argv)
   local out, err = helpers.sink(), helpers.sink()
   local status = cli.main(argv, out, err)
   return status, out.text(), err.text()
end

-- A checkpoint in dir of a GPT of 2 layers x 16, 2 heads, 32 rows of which `vocab` (default 20)
-- are the real vocabulary, every value different; o: tied (default true), bias, n_head, scale
-- (of every value, default 1).
local function make_checkpoint(dir, o)
   o = o or {}
   local n_head = o.n_head or 2
   local model = lw.nn.GPT.new{ n_layer = 2, n_embd = 16, n_head = n_head, vocab = 32,
      seq_len = 8, tied = o.tied ~= false, bias = o.bias or false }
   local ddp = lw.ddp.new(model:parameters(), lw.comm.self())
   local opt = lw.optim.new(ddp, { lr = 1e-2 })
   for i, s in ipairs(model:parameters()) do
      ddp:param(s.name):copy(function(k) return (o.scale or 1) * math.sin(1.3 * i + 0.07 * k) end)
   end
   return lw.checkpoint.save(dir, { ddp = ddp, opt = opt, step = 1, extra = { n_layer = 2,
      n_embd = 16, n_head = n_head, vocab = o.vocab or 20, seq = 8, data_kind = "tokens" } })
end

-- What an export directory holds: name -> contents, every entry (a symbolic link as "-> target").
local function snapshot(dir)
   local out = {}
   for _, name in ipairs(helpers.lines_of("ls -A " .. dir)) do
      local target = helpers.lines_of("readlink " .. dir .. "/" .. name)[1]
      out[name] = target and ("-> " .. target) or helpers.slurp(dir .. "/" .. name)
   end
   return out
end

-- The heads that out's config.json says, and those its model.safetensors records (the config
-- it was written with): one export's files agree.
local function heads_of(out)
   local st = safetensors.open(out .. "/model.safetensors")
   return json.decode(helpers.slurp(out .. "/config.json")).n_head,
      json.decode(safetensors.metadata(st, "config")).n_head
end

-- The names in dir (an export's parent: the staging directory beside OUT_DIR is there only
-- while an export runs).
local function beside(dir) return helpers.lines_of("ls -A " .. dir) end

-- The tensors of a safetensors file: name -> { shape, data (float*) }, and the open file.
local function tensors_of(path)
   local st = safetensors.open(path)
   local out = {}
   for _, name in ipairs(safetensors.names(st)) do
      local view = safetensors.find(st, name)
      assert.equal("F32", ffi.string(view.dtype))
      local shape = {}
      for d = 0, view.ndim - 1 do shape[d + 1] = tonumber(view.shape[d]) end
      -- st anchored with each view: data points into it, and its ffi.gc frees it once unreachable
      out[name] = { shape = shape, data = ffi.cast("const float *", view.data), st = st }
   end
   return out, st
end

-- The lwopt name an exported name holds, and whether it is stored transposed: the mapping of
-- docs/checkpoints.md, written again here (Conv1D weights transposed in hf-gpt2 only).
local function ours_of(name, format)
   local short = name:gsub("^transformer%.", ""):gsub("attn%.c_attn", "attn.qkv")
      :gsub("attn%.c_proj", "attn.proj"):gsub("mlp%.c_fc", "mlp.fc"):gsub("mlp%.c_proj", "mlp.proj")
   if format == "nanogpt" and name == "lm_head.weight" then short = "wte.weight" end
   return short, format == "hf-gpt2" and name:match("%.c_[%w_]+%.weight$") ~= nil
end

-- Compares every tensor of the export at out_dir with the checkpoint's (ckpt: its step dir);
-- returns how many tensors were compared and how many were zero biases lwopt does not have.
local function compare(ckpt, out_dir, format, vocab)
   local ours = tensors_of(ckpt .. "/model.safetensors")
   local theirs = tensors_of(out_dir .. "/model.safetensors")
   local count, zeros = 0, 0
   for name, t in pairs(theirs) do
      count = count + 1
      local short, transposed = ours_of(name, format)
      local o = ours[short]
      local n = 1
      for _, d in ipairs(t.shape) do n = n * d end
      if o == nil then
         assert.matches("%.bias$", name) -- only a bias may be missing in lwopt's model
         for i = 0, n - 1 do assert.equal(0, t.data[i], name) end
         zeros = zeros + 1
      elseif transposed then
         assert.same({ o.shape[2], o.shape[1] }, t.shape, name)
         local n_in, n_out = t.shape[1], t.shape[2]
         for i = 0, n_in - 1 do
            for j = 0, n_out - 1 do
               assert.equal(o.data[j * n_in + i], t.data[i * n_out + j], name)
            end
         end
      else
         local rows = (short == "wte.weight" or short == "lm_head.weight")
            and (format == "hf-gpt2" and vocab or o.shape[1]) or o.shape[1]
         assert.same({ rows, unpack(o.shape, 2) }, t.shape, name)
         for i = 0, n - 1 do assert.equal(o.data[i], t.data[i], name) end
      end
   end
   return count, zeros
end

describe("lwopt export", function()
   local dir
   before_each(function() dir = helpers.fresh_path() end)
   after_each(function() os.execute("rm -rf " .. dir) end)

   it("writes hf-gpt2: Conv1D weights transposed, zero biases, the real vocabulary", function()
      local ckpt = make_checkpoint(dir .. "/ck")
      local status, out, err = run({ "export", ckpt, "--format", "hf-gpt2", dir .. "/hf" })
      assert.equal(0, status, err)
      assert.matches("exported " .. ckpt .. " (step 1) as hf-gpt2: " .. dir
         .. "/hf/model.safetensors (28 tensors", out, 1, true)
      assert.matches("vocabulary 20, padding rows 20-31 left out; tied LM head left out", out, 1,
         true)
      -- wte, wpe, per layer 2 norms x 2 and 4 linears x 2, ln_f x 2; a tied lm_head left out
      local count, zeros = compare(ckpt, dir .. "/hf", "hf-gpt2", 20)
      assert.equal(2 + 2 * 12 + 2, count)
      assert.equal(2 * 6 + 1, zeros)
      local config = json.decode(helpers.slurp(dir .. "/hf/config.json"))
      assert.same({ "GPT2LMHeadModel" }, { unpack(config.architectures) })
      for k, v in pairs({ model_type = "gpt2", vocab_size = 20, n_positions = 8, n_embd = 16,
         n_layer = 2, n_head = 2, activation_function = "gelu_new", layer_norm_epsilon = 1e-5,
         tie_word_embeddings = true, n_inner = json.null }) do
         assert.equal(v, config[k], k)
      end
      local _, st = tensors_of(dir .. "/hf/model.safetensors")
      assert.equal("pt", safetensors.metadata(st, "format"))
      assert.same(config, json.decode(safetensors.metadata(st, "config")))
   end)

   it("writes an untied model's lm_head and a model's own biases", function()
      local ckpt = make_checkpoint(dir .. "/ck", { tied = false, bias = true })
      assert.equal(0, (run({ "export", ckpt, dir .. "/hf" }))) -- hf-gpt2 is the default
      local count, zeros = compare(ckpt, dir .. "/hf", "hf-gpt2", 20)
      assert.equal(2 + 2 * 12 + 2 + 1, count)
      assert.equal(0, zeros)
      assert.is_false(json.decode(helpers.slurp(dir .. "/hf/config.json")).tie_word_embeddings)
   end)

   it("writes nanogpt: nn.Linear weights as they are, the padded vocabulary, lm_head tied",
      function()
      local ckpt = make_checkpoint(dir .. "/ck")
      local status, _, err = run({ "export", ckpt, "--format", "nanogpt", dir .. "/ng" })
      assert.equal(0, status, err)
      local count, zeros = compare(ckpt, dir .. "/ng", "nanogpt", 20)
      assert.equal(2 + 2 * 6 + 1 + 1, count) -- no biases; lm_head a copy of wte
      assert.equal(0, zeros)
      local config = json.decode(helpers.slurp(dir .. "/ng/config.json"))
      assert.same({ block_size = 8, vocab_size = 32, n_layer = 2, n_head = 2, n_embd = 16,
         dropout = 0, bias = false }, config)
      status, _, err = run({ "export", make_checkpoint(dir .. "/untied", { tied = false }),
         "--format", "nanogpt", dir .. "/ng2" })
      assert.equal(1, status)
      assert.equal("lwopt export: --format nanogpt: nanoGPT ties its LM head to the token "
         .. "embedding, and this model's is untied\n", err)
   end)

   it("takes a --ckpt-dir, a step directory or a model.safetensors", function()
      local ckpt = make_checkpoint(dir .. "/ck")
      for _, source in ipairs({ dir .. "/ck", ckpt, ckpt .. "/model.safetensors" }) do
         local status, out, err = run({ "export", source, dir .. "/out" })
         assert.equal(0, status, err)
         assert.matches("(step 1) as hf-gpt2", out, 1, true)
         assert.equal(28, (compare(ckpt, dir .. "/out", "hf-gpt2", 20)))
      end
   end)

   it("reads the heads and vocabulary a --save-params file records, or asks for them",
      function()
      local file = dir .. "/p.safetensors"
      local out, status = helpers.sh("luajit recipes/gpt_small.lua --preset tiny --steps 1 "
         .. "--sample 0 --quiet --save-params " .. file)
      assert.equal(0, status, out)
      local code, said, err = run({ "export", file, dir .. "/hf" })
      assert.equal(0, code, err)
      assert.matches("vocabulary 256;", said, 1, true)
      -- the same tensors without the file's metadata: nothing says the heads or the vocabulary
      local ckpt = make_checkpoint(dir .. "/ck")
      os.execute("mkdir -p " .. dir .. "/bare && cp " .. ckpt .. "/model.safetensors " .. dir
         .. "/bare/weights.safetensors")
      local bare = dir .. "/bare/weights.safetensors"
      code, _, err = run({ "export", bare, dir .. "/hf2" })
      assert.equal(1, code)
      assert.equal("lwopt export: " .. bare .. " does not say its number of attention heads (no "
         .. "checkpoint manifest beside it, no lwopt settings in it): give --n-head N\n", err)
      code, _, err = run({ "export", bare, "--n-head", "2", dir .. "/hf2" })
      assert.equal("lwopt export: " .. bare .. " does not say its vocabulary (it has 32 rows, "
         .. "padded): give --vocab N, the tokenizer's\n", err)
      code, _, err = run({ "export", bare, "--n-head", "2", "--vocab", "20", dir .. "/hf2" })
      assert.equal(0, code, err)
      compare(ckpt, dir .. "/hf2", "hf-gpt2", 20)
   end)

   it("refuses with one line: formats, arguments, missing and foreign inputs, its own input",
      function()
      local ckpt = make_checkpoint(dir .. "/ck")
      local cases = {
         { { "export", ckpt, "--format", "onnx", dir .. "/o" }, 2, "lwopt export: --format must "
           .. "be one of hf-gpt2|nanogpt|hf-llama|nanochat, got 'onnx' (lwopt export --help "
           .. "lists the flags)\n" },
         { { "export", ckpt }, 2, "lwopt export: needs CKPT and OUT_DIR, got 1 argument (lwopt "
           .. "export --help lists the flags)\n" },
         { { "export", dir .. "/nothing", dir .. "/o" }, 1, "lwopt export: " .. dir
           .. "/nothing does not exist\n" },
         { { "export", ckpt, ckpt }, 1, "lwopt export: " .. ckpt .. "/model.safetensors is the "
           .. "checkpoint's own model.safetensors: writing it would destroy the input; choose "
           .. "another OUT_DIR\n" },
         { { "export", dir, dir .. "/o" }, 1, "lwopt export: " .. dir .. " is not a checkpoint "
           .. "(no manifest.json) and holds none (" .. dir .. " holds no checkpoint)\n" },
      }
      for _, case in ipairs(cases) do
         local status, _, err = run(case[1])
         assert.equal(case[2], status, err)
         assert.equal(case[3], err)
      end
      -- a mixture of experts has no GPT-2 layout
      local model = lw.nn.GPT.new{ n_layer = 1, n_embd = 16, n_head = 2, vocab = 32, seq_len = 8,
         n_expert = 2 }
      local ddp = lw.ddp.new(model:parameters(), lw.comm.self())
      local moe = lw.checkpoint.save(dir .. "/moe", { ddp = ddp, step = 1,
         opt = lw.optim.new(ddp, { lr = 1e-2 }),
         extra = { n_layer = 1, n_head = 2, n_expert = 2 } })
      local status, _, err = run({ "export", moe, dir .. "/o" })
      assert.equal(1, status)
      assert.equal("lwopt export: " .. moe .. " is a mixture of experts (2 experts per layer): "
         .. "only dense GPTs are exported (GPT-2 and nanoGPT have one MLP per layer)\n", err)
   end)

   it("replaces a previous export whole, keeping OUT_DIR's other files", function()
      local two = make_checkpoint(dir .. "/two")
      local four = make_checkpoint(dir .. "/four", { n_head = 4, scale = 0.5 })
      local out = dir .. "/out/hf"
      assert.equal(0, (run({ "export", two, out })))
      assert.same({ 2, 2 }, { heads_of(out) })
      -- a user's files beside the export: a tokenizer file and a link to it
      local f = assert(io.open(out .. "/tokenizer.json", "wb"))
      f:write("{\"model\": {}}\n")
      f:close()
      os.execute("ln -s tokenizer.json " .. out .. "/vocab.json")
      local status, said, err = run({ "export", four, out .. "/" })
      assert.equal(0, status, err)
      assert.matches("as hf-gpt2: " .. out .. "/model.safetensors (", said, 1, true)
      assert.same({ 4, 4 }, { heads_of(out) })
      assert.equal(28, (compare(four, out, "hf-gpt2", 20)))
      assert.equal("{\"model\": {}}\n", helpers.slurp(out .. "/tokenizer.json"))
      assert.equal("-> tokenizer.json", snapshot(out)["vocab.json"])
      assert.same({ "hf" }, beside(dir .. "/out"))
   end)

   it("leaves OUT_DIR as it was when the export fails or is killed before it is whole",
      function()
      local two = make_checkpoint(dir .. "/two")
      local four = make_checkpoint(dir .. "/four", { n_head = 4, scale = 0.5 })
      local out = dir .. "/out/hf"
      assert.equal(0, (run({ "export", two, out })))
      os.execute("echo tokens > " .. out .. "/tokenizer.json")
      local before = snapshot(out)
      -- config.json cannot be made after model.safetensors was written (a full disk, say)
      local encode = json.encode
      json.encode = function(value, indent)
         if indent then error("no space left on device", 0) end
         return encode(value)
      end
      local ok, status, _, err = pcall(run, { "export", four, out })
      json.encode = encode
      assert.is_true(ok, status)
      assert.same(before, snapshot(out))
      assert.equal(1, status)
      assert.equal("lwopt export: no space left on device\n", err)
      assert.same({ "hf" }, beside(dir .. "/out"))
      -- killed at the same moment: a process that ends there, without a word
      local said, code = helpers.sh(("luajit -e \"package.path = 'lua/?.lua;lua/?/init.lua;"
         .. "build/lua/?.lua;' .. package.path; local json = require('lwopt.json'); "
         .. "local encode = json.encode; json.encode = function(v, indent) "
         .. "if indent then os.exit(137) end return encode(v) end; "
         .. "os.exit(require('lwopt.app.cli').main({ 'export', '%s', '%s' }))\""):format(four,
         out))
      assert.equal(137, code, said)
      assert.same(before, snapshot(out))
      assert.same({ 2, 2 }, { heads_of(out) })
      -- the next export clears what the killed one left beside OUT_DIR
      assert.equal(0, (run({ "export", four, out })))
      assert.same({ 4, 4 }, { heads_of(out) })
      assert.equal("tokens\n", helpers.slurp(out .. "/tokenizer.json"))
      assert.same({ "hf" }, beside(dir .. "/out"))
   end)

   it("says each failure in one line of its own words, the paths and reasons kept", function()
      local ckpt = make_checkpoint(dir .. "/ck")
      local step = ckpt:match("[^/]+$")
      local function sh(command) assert.equal(0, select(2, helpers.sh(command)), command) end
      sh(("echo hi > %s/afile && mkfifo %s/fifo && ln -s loop %s/loop"):format(dir, dir, dir))
      -- unreadable checkpoints: a manifest that is not JSON, a model file cut short or missing
      sh(("mkdir %s/bad && echo garbage > %s/bad/manifest.json"):format(dir, dir))
      sh(("cp -r %s/ck %s/cut && truncate -s 1000 %s/cut/%s/model.safetensors"):format(dir, dir,
         dir, step))
      sh(("cp -r %s/ck %s/gone && rm %s/gone/%s/model.safetensors"):format(dir, dir, dir, step))
      -- an OUT_DIR holding a directory, and one holding a FIFO
      sh(("mkdir -p %s/o1/config.json %s/o2 && mkfifo %s/o2/pipe"):format(dir, dir, dir))
      local cut = ("%s/cut/%s/model.safetensors"):format(dir, step)
      local gone = ("%s/gone/%s/model.safetensors"):format(dir, step)
      local bytes = helpers.lines_of("stat -c %s " .. ckpt .. "/model.safetensors")[1]
      local cases = {
         { { dir .. "/afile", dir .. "/o" }, dir .. "/afile: not a readable safetensors file (3 "
           .. "bytes is too short for a header)" },
         { { dir .. "/fifo", dir .. "/o" }, dir .. "/fifo is neither a file nor a directory" },
         { { dir .. "/loop", dir .. "/o" }, "cannot look at " .. dir .. "/loop: Too many levels "
           .. "of symbolic links" },
         { { dir .. "/bad", dir .. "/o" }, dir .. "/bad/manifest.json is not valid JSON "
           .. "(unexpected character at byte 0)" },
         { { dir .. "/cut/" .. step, dir .. "/o" }, cut .. " has 1000 bytes, the manifest says "
           .. bytes .. " (truncated?)" },
         { { dir .. "/gone/" .. step, dir .. "/o" }, gone .. ": missing or unreadable (cannot "
           .. "open " .. gone .. ": No such file or directory)" },
         { { ckpt, dir .. "/afile" }, dir .. "/afile exists and is not a directory" },
         { { ckpt, dir .. "/afile/o" }, dir .. "/afile/o cannot be created: " .. dir
           .. "/afile exists and is not a directory" },
         { { ckpt, dir .. "/loop" }, "cannot look at " .. dir .. "/loop: Too many levels of "
           .. "symbolic links" },
         { { ckpt, dir .. "/o1" }, dir .. "/o1 holds the directory 'config.json': it is replaced "
           .. "whole and only its files are carried over; move 'config.json' out or choose "
           .. "another directory" },
         { { ckpt, dir .. "/o2" }, dir .. "/o2 holds 'pipe', which is not a regular file: it is "
           .. "replaced whole and only its files are carried over; move 'pipe' out or choose "
           .. "another directory" },
         { { ckpt, dir .. "/ck" }, dir .. "/ck holds the directory '" .. step .. "': it is "
           .. "replaced whole and only its files are carried over; move '" .. step .. "' out "
           .. "or choose another directory" },
      }
      -- a directory no one may create anything in (root included): /proc's top
      if select(2, helpers.sh("test -d /proc/self")) == 0 then
         cases[#cases + 1] = { { ckpt, "/proc/lwopt-export" }, "/proc/lwopt-export cannot be "
            .. "written: cannot create directory /proc/.lwopt-export.lwopt-staging: No such file "
            .. "or directory (its new files are written beside it first)" }
      end
      for _, case in ipairs(cases) do
         local status, _, err = run({ "export", unpack(case[1]) })
         assert.equal(1, status, err)
         assert.equal("lwopt export: " .. case[2] .. "\n", err)
      end
      -- nothing was written anywhere
      assert.same({ "afile", "bad", "ck", "cut", "fifo", "gone", "loop", "o1", "o2" },
         beside(dir))
      assert.same({ "config.json" }, beside(dir .. "/o1"))
   end)

   it("refuses a file of 200,000 tensors in one line, in time linear in their number", function()
      -- a quadratic reader (each name looked up by a linear search) takes minutes here, a
      -- linear one about a second: 60 s tells them apart on any machine that runs the specs
      os.execute("mkdir -p " .. dir)
      local file = helpers.many_tensors(dir .. "/many.safetensors", 200000)
      local out, status = helpers.sh(("timeout -k 5 60 bin/lwopt export %s %s/o"):format(file,
         dir))
      assert.equal(1, status, out)
      assert.equal("lwopt export: " .. file .. " holds no 'wte.weight' and 'wpe.weight': not an "
         .. "lwopt GPT (its first tensors: t.1, t.2, t.3)\n", out)
   end)

   it("is listed by lwopt help and explains itself with --help", function()
      local status, out = run({ "help" })
      assert.equal(0, status)
      assert.matches("export CKPT --format hf-gpt2|nanogpt OUT_DIR", out, 1, true)
      status, out = run({ "export", "--help" })
      assert.equal(0, status)
      assert.matches("usage: lwopt export CKPT", out, 1, true)
      assert.matches("--n-head INT", out, 1, true)
   end)
end)
