-- cli_spec.lua: the lwopt command (lua/lwopt/app/cli.lua) in-process, and bin/lwopt as a user
-- runs it, from another directory.
local cli = require("lwopt.app.cli")
local lw = require("lwopt")
local helpers = require("helpers")

local function run(argv)
   local out, err = helpers.sink(), helpers.sink()
   local status = cli.main(argv, out, err)
   return status, out.text(), err.text()
end

local root = assert(io.popen("pwd")):read("*l")
local bin = root .. "/bin/lwopt"

describe("lwopt layout", function()
   it("prints the map of a GPT-2 124M layout at dp 8 with --buckets", function()
      local status, out = run({ "layout", "--arch", "gpt", "--n-layer", "12", "--n-embd", "768",
         "--n-head", "12", "--dp", "8", "--algorithm", "cost", "--buckets" })
      assert.equal(0, status)
      assert.matches("layout  dp 8  expert_dp 8  algorithm cost", out, 1, true)
      assert.matches("    r7 |", out, 1, true)
      assert.matches("stats\n", out, 1, true)
   end)

   it("prints a summary that fits a screen by default, padding quoted one way", function()
      -- GPT-2 1.5B at dp 64: 204 lines as a map
      local status, out = run({ "layout", "--n-layer", "48", "--n-embd", "1600", "--n-head",
         "25", "--dp", "64" })
      assert.equal(0, status)
      local n = select(2, out:gsub("\n", ""))
      assert.is_true(n <= 20, out)
      assert.is_nil(out:find("\n    r0 |", 1, true))
      assert.matches("buffer 2  muon  f32/f32  cost  dp 64  1,638,400,000 elements  real "
         .. "1,474,560,000  padding 163,840,000 (11.11%)  1 bucket\n", out, 1, true)
      assert.matches("largest buckets (3 of 3; --buckets draws each, rank by rank)\n  buffer 2 "
         .. "bucket 1  192 params  64 x 25,600,000  real 1,474,560,000  padding 163,840,000 "
         .. "(11.11%)\n", out, 1, true)
      assert.matches("muon: 1,474,560,000 elements, padding 163,840,000 (11.11%)\n", out, 1, true)
      assert.matches("imbalance 1.111", out, 1, true)
      -- one percentage of the padding: of the real elements, never of the buffer
      assert.is_nil(out:find("10.00%", 1, true))
   end)

   it("prints the same JSON as layout:json()", function()
      local status, out = run({ "layout", "--n-layer", "2", "--n-embd", "64", "--n-head", "2",
         "--dp", "4", "--bucket-size", "10K", "--json" })
      assert.equal(0, status)
      local l = lw.layout.compute(lw.arch.gpt{ n_layer = 2, n_embd = 64, n_head = 2 },
         { dp = 4, bucket_size = 10000 })
      assert.equal(l:json("  ") .. "\n", out)
   end)

   it("lays out any registered model from its own fields, as lw.models declares it", function()
      local argv = { "layout", "--arch", "llama", "--n-layer", "1", "--n-embd", "64", "--n-head",
         "4", "--n-kv-head", "2", "--n-expert", "4", "--expert-hidden", "32", "--vocab", "100",
         "--shared-expert", "--dp", "4", "--expert-dp", "2", "--json" }
      local status, out = run(argv)
      assert.equal(0, status)
      local specs = lw.models.specs("llama", { n_layer = 1, n_embd = 64, n_head = 4,
         n_kv_head = 2, n_expert = 4, expert_hidden = 32, vocab = 100, shared_expert = true })
      local l = lw.layout.compute(specs, { dp = 4, expert_dp = 2 })
      assert.equal(l:json("  ") .. "\n", out)
      -- SwiGLU experts: fc holds gate and up
      assert.equal(2 * 32 * 64, l:place("h.0.moe.experts.3.fc.weight").numel)
      -- on|off fields, --untied, and one TP rank's shards
      status, out = run({ "layout", "--n-layer", "1", "--n-embd", "64", "--n-head", "2",
         "--vocab", "100", "--bias", "--tied", "off", "--tp", "2", "--json" })
      assert.equal(0, status)
      l = lw.layout.compute(lw.models.specs("gpt", { n_layer = 1, n_embd = 64, n_head = 2,
         vocab = 100, bias = true, tied = false, tp = 2, tp_rank = 0 }), { dp = 1 })
      assert.equal(l:json("  ") .. "\n", out)
      local _, again = run({ "layout", "--n-layer", "1", "--n-embd", "64", "--n-head", "2",
         "--vocab", "100", "--bias", "on", "--untied", "--tp", "2", "--json" })
      assert.equal(out, again)
   end)

   it("says what to use instead of --arch moe, --fused and --ffn-hidden", function()
      local base = { "layout", "--n-layer", "1", "--n-embd", "64", "--n-head", "4" }
      local function refused(...)
         local argv = { unpack(base) }
         for _, a in ipairs({ ... }) do argv[#argv + 1] = a end
         local status, _, err = run(argv)
         assert.equal(2, status)
         return err
      end
      assert.matches("--arch moe is not a model: a mixture of experts is a model with "
         .. "--n-expert N, e.g. --arch llama --n-expert 8", refused("--arch", "moe"), 1, true)
      assert.matches("--fused is gone: every model declares its fused weights",
         refused("--arch", "llama", "--fused"), 1, true)
      assert.matches("--ffn-hidden is now --mlp-hidden", refused("--ffn-hidden", "128"), 1, true)
      assert.equal("lwopt: --arch gpt3 is not a model (gpt, llama, nanochat; a models file's: "
         .. "--models FILE) (lwopt layout --help lists them)\n", refused("--arch", "gpt3"))
   end)

   it("reports bad flags in one line with status 2, bad values with status 1", function()
      local status, _, err = run({ "layout", "--n-layers", "2" })
      assert.equal(2, status)
      assert.equal("lwopt: unknown flag --n-layers (did you mean --n-layer?) (lwopt layout --help "
         .. "lists them)\n", err)
      status, _, err = run({ "layout", "--n-layer", "2", "--n-embd", "65", "--n-head", "2" })
      assert.equal(1, status)
      assert.equal("lwopt layout: --n-embd (65) must be divisible by --n-head (2)\n", err)
      status, _, err = run({ "layout", "--tied", "--untied" })
      assert.equal(2, status)
   end)

   it("names the flags, not the Lua fields, and bounds them as the recipe does", function()
      local gpt = "layout --n-layer 1 --n-embd 64 --n-head 2 "
      for _, case in ipairs({
         { "layout", "--arch gpt needs --n-layer" },
         { "layout --n-layer 2 --n-embd 64", "--arch gpt needs --n-head" },
         { "layout --arch llama --n-layer 2 --n-head 2", "--arch llama needs --n-embd" },
         { gpt .. "--dp 0", "--dp must be >= 1, got 0" },
         { gpt .. "--bucket-size 0", "--bucket-size must be >= 1, got 0" },
         { "layout --n-layer 0 --n-embd 64 --n-head 2", "--n-layer must be >= 1, got 0" },
      }) do
         local argv = {}
         for word in case[1]:gmatch("%S+") do argv[#argv + 1] = word end
         local status, _, err = run(argv)
         assert.equal(2, status, case[1])
         assert.equal("lwopt: " .. case[2] .. " (lwopt layout --help lists them)\n", err)
      end
   end)
end)

describe("lwopt", function()
   it("lists its commands with --help and fails on an unknown one", function()
      local status, out = run({ "--help" })
      assert.equal(0, status)
      for _, command in ipairs({ "layout", "run FILE", "train [flags]", "repl", "version" }) do
         assert.matches(command, out, 1, true)
      end
      local bad, _, err = run({ "fly" })
      assert.equal(2, bad)
      assert.matches("unknown command 'fly'", err, 1, true)
   end)

   it("runs from another directory as bin/lwopt", function()
      local out, status = helpers.sh("cd /tmp && " .. bin .. " layout --n-layer 1 --n-embd 64 "
         .. "--n-head 2 --dp 2 --ascii --buckets")
      assert.equal(0, status)
      assert.matches("r1 |", out, 1, true)
   end)

   it("runs a script with its arguments and returns its status", function()
      local out, status = helpers.sh("cd /tmp && " .. bin .. " run " .. root
         .. "/spec/fixtures/echo_args.lua a b")
      assert.equal(3, status)
      assert.matches("args a,b arg1 a", out, 1, true)
      assert.matches("lwopt " .. lw.version, out, 1, true)
      local missing, code = helpers.sh(bin .. " run /nonexistent.lua")
      assert.equal(1, code)
      assert.matches("cannot open /nonexistent.lua", missing, 1, true)
   end)

   it("starts a REPL where lw is loaded and expressions print", function()
      local input = helpers.tempfile("x = lw.layout.compute(lw.arch.gpt{n_layer = 1, n_embd = 64, "
         .. "n_head = 2}, {dp = 2})\nx:stats().ranks\n")
      local out, status = helpers.sh(bin .. " repl < " .. input)
      os.remove(input)
      assert.equal(0, status)
      assert.matches("lwopt " .. lw.version .. ", LuaJIT REPL", out, 1, true)
      assert.matches("lw> 2\n", out, 1, true)
   end)

   it("tells its version, library and LuaJIT, and why CUDA is off in lwopt device's words",
      function()
      local status, out = run({ "version" })
      assert.equal(0, status)
      assert.matches("^lwopt %d+%.%d+%.%d+\nlibrary: .*liblwopt%.so[.%d]*\nluajit: LuaJIT [^\n]+\n"
         .. "cuda: [^\n]+\n$", out)
      local d, why = lw.device_info("cuda")
      if d then
         assert.matches("\ncuda: on (" .. lw.device_line("cuda") .. ")\n", out, 1, true)
      else
         -- "device: CUDA is not available: no usable NVIDIA driver (libcuda.so ...)" reads
         -- "cuda: off (no usable NVIDIA driver: libcuda.so ...)"
         local reason = why:gsub("^device: CUDA is not available: ", "")
         local head = reason:match("^[^(]*"):gsub("%s+$", "")
         assert.matches("\ncuda: off (" .. head, out, 1, true)
         assert.is_nil(out:find("((", 1, true))
      end
      local bad, _, err = run({ "version", "x" })
      assert.equal(2, bad)
      assert.matches("version takes no arguments", err, 1, true)
   end)

   it("prints one line with --version, as bin/lwopt from anywhere", function()
      local out, status = helpers.sh("cd /tmp && " .. bin .. " --version")
      assert.equal(0, status)
      assert.equal("lwopt " .. lw.version .. "\n", out)
   end)

   it("trains with recipes/gpt_small.lua and its flags from any directory", function()
      local out, status = helpers.sh("cd /tmp && " .. bin .. " train --preset tiny --steps 2 "
         .. "--sample 10 --eval-max 1 --progress lines")
      assert.equal(0, status, out)
      assert.matches("^lwopt [^\n]*GPT 4 layers x 64, 4 heads", out)
      assert.matches(root .. "/bin/../data/kjv.txt (4298239 bytes)", out, 1, true)
      assert.matches("step     2/2  loss", out, 1, true)
      assert.matches("sample:\nAnd God said", out, 1, true)
      -- its usage errors and --help are the recipe's
      out, status = helpers.sh("cd /tmp && " .. bin .. " train --step 3")
      assert.equal(2, status)
      assert.equal("unknown flag --step (did you mean --steps?) (--help lists the flags)\n", out)
      out, status = helpers.sh(bin .. " train --help")
      assert.equal(0, status)
      assert.matches("recipes/gpt_small.lua [flags]\n", out, 1, true)
      assert.matches("--preset {tiny|small|wide|gpt2|gpt2-medium|moe}", out, 1, true)
   end)

   it("says in one line, before the library is built, that it must be built first", function()
      -- a copy of the tree's scripts and modules without build/: as a fresh clone is
      local tree = helpers.fresh_path()
      assert.equal(0, select(2, helpers.sh(("mkdir -p %s && cp -r %s/bin %s/lua %s/recipes %s")
         :format(tree, root, root, root, tree))))
      local lwopt = "cd /tmp && LUA_PATH= " .. tree .. "/bin/lwopt "
      local built = "lwopt: the library is not built yet (no lwopt/cdef.lua, the binding its "
         .. "build generates): run `make build-lib` in the lwopt tree (or cmake -S . -B build && "
         .. "cmake --build build)\n"
      for _, command in ipairs({ "eval --help", "sample --help", "train --help", "export --help",
         "layout --help", "version", "device", "repl", "eval ck --data x" }) do
         local out, err, status = helpers.sh_apart(lwopt .. command .. " < /dev/null")
         assert.same({ "", built, 1 }, { out, err, status }, command)
      end
      local out, err, status = helpers.sh_apart("cd /tmp && luajit " .. tree
         .. "/recipes/gpt_small.lua --help")
      assert.same({ "", built, 1 }, { out, err, status })
      -- what needs no library still works: help, and the log readers
      out, status = helpers.sh(lwopt .. "help")
      assert.same({ 0, "usage: lwopt <command>" }, { status, out:match("^usage: lwopt <command>") })
      out, status = helpers.sh(lwopt .. "csv --help")
      assert.same({ 0, "usage: lwopt csv" }, { status, out:match("^usage: lwopt csv") })
      helpers.sh("rm -rf " .. tree)
   end)
end)
