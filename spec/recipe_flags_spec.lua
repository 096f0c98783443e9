-- recipe_flags_spec.lua: the recipe's flags (lua/lwopt/app/recipe_flags.lua): those that name
-- a library option (ddp = ..., optim = ...) reach lw.ddp.new or lw.optim.new under that option,
-- on/off as a boolean, over the run's own values; and recipes/gpt_small.lua run as a user runs
-- it refuses mistyped flags, values out of range and combinations that cannot work, in one line
-- before any work.
local lw = require("lwopt")
local flags = require("lwopt.flags")
local helpers = require("helpers")
local recipe_flags = require("lwopt.app.recipe_flags")

local root = assert(io.popen("pwd")):read("*l")
local recipe = root .. "/recipes/gpt_small.lua"

-- The flags' values with defaults, and a value for each flag that has none: its first choice,
-- or 64 (half its bound when that is lower: a momentum).
local function values()
   local v = flags.parse({}, recipe_flags.list)
   for _, f in ipairs(recipe_flags.list) do
      local key = f[1]:gsub("-", "_")
      if v[key] == nil and (f.ddp or f.optim) then
         v[key] = type(f[2]) == "table" and f[2][1] or math.min(64, (f.max or 128) / 2)
      end
   end
   v.param_dtype = "fp32"
   return v
end

describe("the recipe's flags that name an option", function()
   it("give lw.ddp.new and lw.optim.new options they take", function()
      local v = values()
      local specs = { { name = "w", shape = { 8, 4 }, role = "matrix" } }
      local d = lw.ddp.new(specs, lw.comm.self(), recipe_flags.options(v, "ddp"))
      assert.equal(v.zero, d.zero)
      local opt = lw.optim.new(d, recipe_flags.options(v, "optim", { weight_decay = 0.1 }))
      assert.equal(v.lr, opt.groups[1].lr)
   end)

   it("put each value under its option's path, on/off as true/false, over the base", function()
      local v = values()
      v.muon_precision, v.split_qkv, v.overlap = "fp32", "off", "on"
      local o = recipe_flags.options(v, "optim", { adamw = { beta1 = 0.9 } })
      assert.same({ "fp32", false }, { o.muon.precision, o.muon.split_qkv })
      assert.equal(0.9, o.adamw.beta1)
      assert.is_true(recipe_flags.options(v, "ddp").overlap)
      local named = 0
      for _, f in ipairs(recipe_flags.list) do
         if f.ddp or f.optim then named = named + 1 end
      end
      assert.is_true(named >= 10, "only " .. named .. " flags name an option")
   end)
end)

describe("the recipe's Muon flags", function()
   local lib = require("lwopt.C").lib
   local function muon_of(argv)
      local v = flags.parse(argv, recipe_flags.list)
      return lw.optim.c_options(recipe_flags.options(v, "optim", { weight_decay = 0.1 })).muon
   end

   it("leave the library's Muon as it is by default (--muon-variant default)", function()
      local c, d = muon_of({}), lib.lw_muon_defaults()
      for _, k in ipairs({ "coeffs", "row_equilibrate", "renormalize", "cautious_wd",
         "weight_decay_mode", "scale", "momentum", "ns_steps", "extra_scale" }) do
         assert.equal(d[k], c[k], k)
      end
   end)

   it("set nanochat's step with --muon-variant nanochat", function()
      local c = muon_of({ "--muon-variant", "nanochat" })
      assert.same({ lib.LW_NS_NANOCHAT, true, true, true, lib.LW_WD_SCALED,
         lib.LW_MUON_SCALE_SHAPE_SCALING, 5, true },
         { tonumber(c.coeffs), c.row_equilibrate, c.renormalize, c.cautious_wd,
           tonumber(c.weight_decay_mode), tonumber(c.scale), c.ns_steps, c.nesterov })
   end)

   it("reach each option alone, and override the variant's", function()
      local c = muon_of({ "--muon-row-equilibrate", "on", "--muon-renormalize", "on",
         "--muon-cautious-wd", "on", "--muon-coefficients", "nanochat",
         "--muon-weight-decay-mode", "independent", "--muon-scale", "spectral" })
      assert.same({ true, true, true, lib.LW_NS_NANOCHAT, lib.LW_WD_INDEPENDENT,
         lib.LW_MUON_SCALE_SPECTRAL },
         { c.row_equilibrate, c.renormalize, c.cautious_wd, tonumber(c.coeffs),
           tonumber(c.weight_decay_mode), tonumber(c.scale) })
      c = muon_of({ "--muon-variant", "nanochat", "--muon-cautious-wd", "off",
         "--muon-coefficients", "polar_express", "--muon-scale", "moonlight" })
      assert.same({ false, lib.LW_NS_POLAR_EXPRESS, lib.LW_MUON_SCALE_MOONLIGHT, true },
         { c.cautious_wd, tonumber(c.coeffs), tonumber(c.scale), c.row_equilibrate })
   end)

   -- tests/test_muon_variants.c (nanochat_options, test_nanochat_normuon) checks these options
   -- through lw_optimizer_step against nanochat's whole step: this is the other half, that the
   -- flags give exactly them.
   it("give --optimizer normuon --muon-variant nanochat exactly the options of nanochat's whole "
      .. "step, with every Muon matrix routed to NorMuon", function()
      local ffi = require("ffi")
      local options = require("lwopt.options")
      local recipe = require("lwopt.app.recipe")
      local v = flags.parse({ "--optimizer", "normuon", "--muon-variant", "nanochat" },
         recipe_flags.list)
      local c = lw.optim.c_options(recipe_flags.options(v, "optim", { weight_decay = 0.1 }))
      -- the test's nanochat_options: the library's defaults but these
      local want = lib.lw_muon_defaults()
      want.momentum, want.nesterov, want.ns_steps, want.coeffs = 0.95, true, 5, lib.LW_NS_NANOCHAT
      want.row_equilibrate, want.renormalize, want.cautious_wd = true, true, true
      want.weight_decay_mode, want.scale = lib.LW_WD_SCALED, lib.LW_MUON_SCALE_SHAPE_SCALING
      want.extra_scale = 1
      for _, f in ipairs(options.fields("lw_muon_options")) do
         if f.kind ~= "pointer" then
            assert.equal(tonumber(want[f.name]) or want[f.name],
               tonumber(c.muon[f.name]) or c.muon[f.name], "muon." .. f.name)
         end
      end
      -- NorMuon's: the library's defaults, nanochat's beta2 and clamp (in float)
      local float = function(x) return tonumber(ffi.new("float", x)) end
      assert.same({ float(0.9), float(1e-10) }, { c.normuon.beta2, c.normuon.floor })
      -- the routing: what default routing gives Muon goes to NorMuon, the rest as it was
      assert.equal("normuon", v.optimizer)
      local params = lw.arch.gpt({ n_layer = 2, n_embd = 32, n_head = 4 })
      local plain = lw.route(params)
      local routed = lw.route(params, recipe.to_normuon(lw.route.default_rules))
      local moved = 0
      for i, s in ipairs(routed) do
         local was = plain[i].optimizer
         assert.equal(was == "muon" and "normuon" or was, s.optimizer, s.name)
         if was == "muon" then moved = moved + 1 end
      end
      assert.equal(2 * 4, moved) -- per block: the attention's QKV and projection, the MLP's two
   end)

   it("refuse row equilibration under --muon-tp-mode distributed, before any work", function()
      for _, case in ipairs({
         { "--muon-variant nanochat", "--muon-variant nanochat" },
         { "--muon-row-equilibrate on", "--muon-row-equilibrate on" },
      }) do
         local out, status = helpers.sh("luajit " .. recipe .. " --preset tiny --tp 2 "
            .. "--muon-tp-mode distributed " .. case[1])
         assert.equal(1, status, case[1])
         assert.equal("--muon-tp-mode distributed shards Newton-Schulz over the TP ranks and "
            .. "cannot equilibrate rows (" .. case[2] .. "): use --muon-tp-mode duplicated or "
            .. "blockwise, or add --muon-row-equilibrate off\n", out)
      end
   end)
end)

describe("recipes/gpt_small.lua's flags", function()
   it("answers a mistyped flag with one line, a suggestion and status 2", function()
      local out, status = helpers.sh("luajit " .. recipe .. " --step 5")
      assert.equal(2, status)
      assert.equal("unknown flag --step (did you mean --steps?) (--help lists the flags)\n", out)
      out, status = helpers.sh("luajit " .. recipe .. " --mode zero")
      assert.equal(2, status)
      assert.equal("--mode must be one of layerwise|legacy|replicated, got 'zero' (--help lists "
         .. "the flags)\n", out)
      out, status = helpers.sh("luajit " .. recipe .. " --help")
      assert.equal(0, status)
      assert.matches("--steps INT", out, 1, true)
   end)

   it("refuses numbers out of range, before any work", function()
      for _, case in ipairs({
         { "--steps 1e20", "--steps expects an integer, got '1e20'" },
         { "--steps 100000000000000000000", "--steps must be between 1 and 1000000000, got "
           .. "100000000000000000000" },
         { "--steps 0", "--steps must be between 1 and 1000000000, got 0" },
         { "--stop-after 0", "--stop-after must be >= 1, got 0" },
         { "--eval-max 0", "--eval-max must be >= 1, got 0" },
         { "--clip -1", "--clip must be >= 0, got -1" },
         { "--warmup -1", "--warmup must be >= 0, got -1" },
         { "--ckpt-every -1", "--ckpt-every must be >= 0, got -1" },
         { "--bucket-size 0", "--bucket-size must be >= 1, got 0" },
         { "--zero 4", "--zero must be between 1 and 3, got 4" },
         { "--seq 10000000", "--seq must be between 1 and 1000000, got 10000000" },
         { "--lr nan", "--lr expects a number, got 'nan'" },
         -- zero and negative learning rates: one rule, one status
         { "--lr 0", "--lr must be > 0, got 0" },
         { "--lr -1", "--lr must be > 0, got -1" },
         { "--timeout -5", "--timeout must be >= 0, got -5" },
      }) do
         local out, status = helpers.sh("luajit " .. recipe .. " --preset tiny " .. case[1])
         assert.equal(2, status, case[1])
         assert.equal(case[2] .. " (--help lists the flags)\n", out)
      end
   end)

   it("refuses flags that need --ckpt-dir, or contradict each other, in one line", function()
      for _, case in ipairs({
         { "--ckpt-every 5", "--ckpt-every needs --ckpt-dir" },
         { "--keep 2", "--keep needs --ckpt-dir" },
         { "--resume", "--resume needs --ckpt-dir" },
         { "--overwrite", "--overwrite needs --ckpt-dir or --log (what it lets a new run "
           .. "replace)" },
         { "--ckpt-dir /tmp/x --resume --overwrite", "--resume continues the checkpoints in "
           .. "--ckpt-dir and --overwrite replaces them: choose one" },
      }) do
         local out, status = helpers.sh("luajit " .. recipe .. " --preset tiny " .. case[1])
         assert.equal(1, status, case[1])
         assert.equal(case[2] .. "\n", out)
      end
   end)

   it("refuses a non-empty --log before any work unless --overwrite or --resume", function()
      local log = helpers.tempfile('{"kind":"config"}\n')
      local run = "cd /tmp && luajit " .. recipe .. " --preset tiny --steps 1 --eval-max 1 "
         .. "--sample 0 --quiet --log " .. log
      local out, status = helpers.sh(run)
      assert.equal(1, status)
      assert.equal("--log " .. log .. " already holds a log (18 bytes): add --overwrite to "
         .. "replace it, or choose another file\n", out)
      assert.equal('{"kind":"config"}\n', helpers.slurp(log))
      out, status = helpers.sh(run .. " --overwrite")
      assert.equal(0, status, out)
      assert.is_nil(helpers.slurp(log):find('{"kind":"config"}\n', 1, true))
      assert.matches('"step":1,', helpers.slurp(log), 1, true)
      helpers.sh("rm -f " .. log .. " " .. log .. ".png " .. log .. ".dat")
   end)

   it("refuses ZeRO and sharding combinations that cannot work, before any work", function()
      for _, case in ipairs({
         { "--shard rows", "--shard rows is row-sharded FSDP: it needs --zero 3, got --zero 1\n" },
         { "--zero 2 --shard rows", "--shard rows is row-sharded FSDP: it needs --zero 3" },
         { "--zero 3 --mode legacy", "--zero 3 shards gradients and parameters across ranks; "
           .. "--mode legacy keeps them whole (use --mode layerwise)\n" },
         { "--zero 2 --mode replicated", "--zero 2 shards gradients across ranks; --mode "
           .. "replicated keeps them whole" },
         { "--zero 2 --mode legacy --shard rows --layout lpt", "--zero 2 shards gradients across "
           .. "ranks; --mode legacy keeps them whole" },
         { "--zero 3 --bucket-size 1000", "at ZeRO-3 a bucket group is gathered whole, but "
           .. "bucket_size 1000 is smaller than 'wte.weight' (16384 elements)" },
      }) do
         local out, status = helpers.sh("luajit " .. recipe .. " --preset tiny " .. case[1])
         assert.equal(1, status)
         assert.matches(case[2], out, 1, true)
         assert.is_nil(out:find("step ", 1, true))
      end
   end)
end)

describe("the recipe's learning rates and optimizer flags", function()
   local gpt_recipe = require("lwopt.app.recipe")

   -- The optimizer of a small GPT's default routing for argv: each parameter's group lr.
   local function lr_of(argv)
      local v = flags.parse(argv, recipe_flags.list)
      v.adamw_lr = v.adamw_lr or 3e-3
      v.lr = v.lr or 3e-3
      v.embedding_lr, v.scalar_lr = v.embedding_lr or v.adamw_lr, v.scalar_lr or v.adamw_lr
      local model = lw.nn.GPT.new({ n_layer = 1, n_embd = 8, n_head = 2, vocab = 128, seq_len = 4,
         tied = true })
      -- as recipe.lua routes --optimizer adamw
      local rules = v.optimizer == "adamw" and { { match = ".", optimizer = "adamw" } } or nil
      local specs = gpt_recipe.with_group_lrs(lw.route(model:parameters(), rules,
         { warn = false }), v)
      local d = lw.ddp.new(specs, lw.comm.self(), { param_dtype = "fp32" })
      local opt = lw.optim.new(d, recipe_flags.options(v, "optim", { normuon = { lr = v.lr } }))
      local by_name = {}
      for _, g in ipairs(opt.groups) do
         for _, name in ipairs(g.params) do by_name[name] = g.lr end
      end
      return by_name
   end

   it("give the matrices --lr, AdamW --adamw-lr, embeddings and gains their own", function()
      local lr = lr_of({ "--lr", "0.02", "--adamw-lr", "0.004", "--embedding-lr", "0.3",
         "--scalar-lr", "0.5" })
      assert.near(0.02, lr["h.0.mlp.fc.weight"], 1e-9)
      assert.near(0.02, lr["h.0.attn.qkv.weight"], 1e-9)
      assert.near(0.3, lr["wte.weight"], 1e-9)
      assert.near(0.3, lr["wpe.weight"], 1e-9)
      assert.near(0.5, lr["h.0.ln_1.weight"], 1e-9)
      assert.near(0.5, lr["ln_f.weight"], 1e-9)
      -- without the group flags every AdamW parameter takes --adamw-lr
      lr = lr_of({ "--lr", "0.02", "--adamw-lr", "0.004" })
      assert.near(0.004, lr["wte.weight"], 1e-9)
      assert.near(0.004, lr["ln_f.weight"], 1e-9)
      -- all AdamW: --adamw-lr for the matrices too
      lr = lr_of({ "--optimizer", "adamw", "--lr", "0.02", "--adamw-lr", "0.004" })
      assert.near(0.004, lr["h.0.mlp.fc.weight"], 1e-9)
      assert.near(0.004, lr["wte.weight"], 1e-9)
   end)

   it("reach AdamW's betas and epsilon, Muon's momentum, Nesterov and steps, the weight decay",
      function()
      local v = flags.parse({ "--adamw-beta1", "0.8", "--adamw-beta2", "0.99", "--adamw-eps",
         "1e-10", "--muon-momentum", "0.9", "--muon-nesterov", "off", "--muon-ns-steps", "7",
         "--weight-decay", "0.05", "--adamw-weight-decay", "0.02" }, recipe_flags.list)
      local c = lw.optim.c_options(recipe_flags.options(v, "optim"))
      assert.near(0.8, c.adamw.beta1, 1e-7)
      assert.near(0.99, c.adamw.beta2, 1e-7)
      assert.near(1e-10, c.adamw.eps, 1e-16)
      assert.near(0.9, c.muon.momentum, 1e-7)
      assert.is_false(c.muon.nesterov)
      assert.equal(7, c.muon.ns_steps)
      local o = recipe_flags.options(v, "optim")
      assert.same({ 0.05, 0.02 }, { o.weight_decay, o.adamw.weight_decay })
      -- defaults: the betas the recipe always trained with, the library's epsilon
      c = lw.optim.c_options(recipe_flags.options(flags.parse({}, recipe_flags.list), "optim"))
      assert.near(0.9, c.adamw.beta1, 1e-7)
      assert.near(0.95, c.adamw.beta2, 1e-7)
      assert.near(1e-8, c.adamw.eps, 1e-15)
   end)
end)

describe("recipes/gpt_small.lua's model and schedule flags", function()
   local run = "cd /tmp && luajit " .. recipe .. " --preset tiny --sample 0 --eval-max 1 "
      .. "--progress lines "

   it("build the model the shape flags give, over the preset's", function()
      local out, status = helpers.sh(run .. "--steps 1 --n-layer 2 --n-embd 32 --n-head 2 --seq 16")
      assert.equal(0, status, out)
      assert.matches("GPT 2 layers x 32, 2 heads", out, 1, true)
      assert.matches("8 x 16 bytes", out, 1, true)
   end)

   it("train on the schedule they choose: the step records' lr is the formula's", function()
      -- wsd over 10 steps: warmup 2, stable to step 6, then 4 steps down to 0.1 of 3e-3
      local out, status = helpers.sh(run .. "--steps 10 --warmup 2 --schedule wsd "
         .. "--decay-steps 4")
      assert.equal(0, status, out)
      local want = { 1.5e-3, 3e-3, 3e-3, 3e-3, 3e-3, 3e-3 }
      for s = 7, 10 do want[s] = 3e-3 * (1 - 0.9 * (s - 6) / 4) end
      for s = 1, 10 do
         local lr = out:match(("step %%s+%d/10  loss [%%d.]+  lr ([%%d.e+-]+)"):format(s))
         assert.near(want[s], tonumber(lr), want[s] * 5e-3, "step " .. s)
      end
      -- linear with --min-lr: the last step is at the floor given
      out, status = helpers.sh(run .. "--steps 4 --warmup 0 --schedule linear --min-lr 6e-4")
      assert.equal(0, status, out)
      assert.matches("step     1/4  loss [%d.]+  lr 3.00e%-03", out)
      assert.matches("step     4/4  loss [%d.]+  lr 6.00e%-04", out)
   end)

   it("refuse shapes and schedules that cannot work, naming the flags", function()
      for _, case in ipairs({
         { "--n-head 3", "--n-head 3 does not divide the width 64 (--n-embd, --preset tiny's)" },
         { "--n-embd 48 --n-head 5", "--n-head 5 does not divide the width 48 (--n-embd)" },
         { "--schedule constant --min-lr 1e-4", "--min-lr: --schedule constant does not decay "
           .. "(cosine, linear or wsd do)" },
         { "--decay-fraction 0.5", "--decay-fraction is for --schedule wsd (warmup-stable-decay), "
           .. "not cosine" },
         { "--schedule wsd --decay-steps 45", "--schedule wsd decays over 45 steps, more than the "
           .. "40 after the warmup (--steps 50 - --warmup 10): lower --decay-steps or --warmup, "
           .. "or raise --steps" },
         { "--schedule wsd --decay-steps 5 --decay-fraction 0.2", "--decay-steps 5, but "
           .. "--decay-fraction 0.2 of --steps 50 is 10: give one of the two" },
         { "--min-lr 1", "--min-lr 1 is above the peak learning rate (--lr 0.003)" },
         { "--optimizer adamw --adamw-lr 1e-3 --min-lr 2e-3", "--min-lr 0.002 is above the peak "
           .. "learning rate (--adamw-lr 0.001)" },
         { "--min-lr 3e-4 --min-lr-ratio 0.2", "--min-lr 0.0003 is 0.1 of --lr 0.003, but "
           .. "--min-lr-ratio is 0.2: give one of the two" },
         { "--reschedule", "--reschedule re-plans a resumed run's schedule: add --resume (with "
           .. "--ckpt-dir)" },
      }) do
         local out, status = helpers.sh("luajit " .. recipe .. " --preset tiny " .. case[1])
         assert.equal(1, status, case[1])
         assert.equal(case[2] .. "\n", out)
      end
      local out, status = helpers.sh("luajit " .. recipe .. " --schedule step")
      assert.equal(2, status)
      assert.matches("--schedule must be one of cosine|linear|constant|wsd, got 'step'", out, 1,
         true)
   end)

   it("warn that --lr is not AdamW's with --optimizer adamw", function()
      local out, status = helpers.sh(run .. "--steps 1 --optimizer adamw --lr 1e-2")
      assert.equal(0, status, out)
      assert.matches("warning: --lr 0.01 is Muon's learning rate, which --optimizer adamw does "
         .. "not use: AdamW's is --adamw-lr (0.003)", out, 1, true)
      assert.matches("step     1/1  loss [%d.]+  lr 3.00e%-04", out) -- AdamW's, in warmup
   end)
end)
