-- recipe_config_spec.lua: --config FILE of recipes/gpt_small.lua (lua/lwopt/app/recipe_config.lua)
-- and a recipe's own presets (presets.with): a Lua table's keys become flags that the command
-- line overrides, unknown keys and bad values are refused by name, a log's configuration record
-- read back trains the same run, and a recipe's presets join --preset's choices.
local helpers = require("helpers")
local flags = require("lwopt.flags")
local presets = require("lwopt.presets")
local recipe_config = require("lwopt.app.recipe_config")
local recipe_flags = require("lwopt.app.recipe_flags")

local root = assert(io.popen("pwd")):read("*l")
local recipe = "cd /tmp && luajit " .. root .. "/recipes/gpt_small.lua "

-- The values the config text (written to a file) and argv make, as the recipe parses them.
local function parsed(text, argv)
   local path = helpers.tempfile(text)
   local args = recipe_config.args(path, recipe_flags.list)
   for _, a in ipairs(argv or {}) do args[#args + 1] = a end
   os.remove(path)
   return assert(flags.parse(args, recipe_flags.list))
end

-- The error config text makes, with its file's name as FILE.
local function refusal(text)
   local path = helpers.tempfile(text)
   local ok, err = pcall(recipe_config.args, path, recipe_flags.list)
   os.remove(path)
   assert.is_false(ok)
   return (err:gsub(path:gsub("%p", "%%%0"), "FILE"))
end

describe("--config FILE", function()
   it("sets the flags a Lua table names, in either spelling, each checked as the flag", function()
      local v = parsed([[return { preset = "tiny", n_layer = 2, ["n-embd"] = 32, lr = 2 * 1e-3,
         schedule = "wsd", ["muon-nesterov"] = false, quiet = true, shared_expert = false }]])
      assert.same({ "tiny", 2, 32, 2e-3, "wsd", "off", true, false },
         { v.preset, v.n_layer, v.n_embd, v.lr, v.schedule, v.muon_nesterov, v.quiet,
           v.shared_expert })
   end)

   it("is overridden by the flags given on the command line", function()
      local v = parsed("return { n_layer = 2, lr = 1e-3, steps = 7 }", { "--lr", "5e-3",
         "--n-layer=3" })
      assert.same({ 3, 5e-3, 7 }, { v.n_layer, v.lr, v.steps })
   end)

   it("refuses unknown keys and bad values by name", function()
      assert.equal("--config FILE: unknown key 'n_layers' (did you mean n_layer?)",
         refusal("return { n_layers = 4 }"))
      assert.equal("--config FILE: unknown key 'warm-up' (did you mean warmup?)",
         refusal("return { ['warm-up'] = 4 }"))
      assert.equal("--config FILE: --lr must be > 0, got 0", refusal("return { lr = 0 }"))
      assert.equal("--config FILE: --schedule must be one of cosine|linear|constant|wsd, got "
         .. "'step'", refusal("return { schedule = 'step' }"))
      assert.equal("--config FILE: --n-layer expects an integer, got '1.5'",
         refusal("return { n_layer = 1.5 }"))
      assert.equal("--config FILE: quiet must be true or false, got 1",
         refusal("return { quiet = 1 }"))
      assert.matches("^%-%-config FILE: n%-layer is given twice %(as n[-_]layer and n[-_]layer%)$",
         refusal("return { n_layer = 2, ['n-layer'] = 2 }"))
      assert.equal("--config FILE: a config cannot name another (config = ...)",
         refusal("return { config = 'x.lua' }"))
      assert.equal("--config FILE: keys must be flag names, got 1", refusal("return { 4 }"))
      assert.equal("--config FILE: must return a table of flag values ({ n_layer = 4, lr = 1e-3 "
         .. "}), returned nil", refusal("x = 1"))
      assert.matches("^%-%-config FILE: .*attempt to call global 'print'",
         refusal("print('hi') return {}"))
      assert.matches("^%-%-config FILE: FILE:1: '}' expected", refusal("return { lr 1 }"))
   end)

   it("refuses a missing file and a log without a configuration record, in one line", function()
      local out, status = helpers.sh(recipe .. "--config /nonexistent/run.lua")
      assert.equal(2, status)
      assert.equal("--config /nonexistent/run.lua cannot be read: /nonexistent/run.lua: No such "
         .. "file or directory\n", out)
      assert.equal('--config FILE: the log holds no configuration record (kind "config")',
         refusal('{"kind":"step","step":1}\n'))
   end)

   it("reads a log's configuration record back: the same run, without its outputs", function()
      local dir = helpers.tempdir()
      local conf = dir .. "/run.lua"
      local f = assert(io.open(conf, "w"))
      f:write('return { preset = "tiny", steps = 3, n_layer = 2, warmup = 1, schedule = "linear", '
         .. 'adamw_lr = 2e-3, sample = 0, eval_max = 2 }\n')
      f:close()
      local out, status = helpers.sh(recipe .. "--config " .. conf .. " --quiet --log " .. dir
         .. "/a.jsonl")
      assert.equal(0, status, out)
      local first = out:match("final validation loss ([%d.]+)")
      out, status = helpers.sh(recipe .. "--config " .. dir .. "/a.jsonl --quiet --log " .. dir
         .. "/b.jsonl")
      assert.equal(0, status, out)
      assert.equal(first, out:match("final validation loss ([%d.]+)"))
      local a, a_config = helpers.log_records(dir .. "/a.jsonl")
      local b, b_config = helpers.log_records(dir .. "/b.jsonl")
      a_config, b_config = a_config[1], b_config[1]
      assert.equal(dir .. "/a.jsonl", b_config.flags.config)
      assert.equal(dir .. "/b.jsonl", b_config.flags.log)
      for _, key in ipairs({ "n-layer", "schedule", "adamw-lr", "steps", "warmup" }) do
         assert.equal(a_config.flags[key], b_config.flags[key], key)
      end
      assert.equal(2, b_config.flags["n-layer"])
      assert.same({ kind = "linear", steps = 3, warmup = 1, min_ratio = 0.1 },
         { kind = b_config.schedule.kind, steps = b_config.schedule.steps,
           warmup = b_config.schedule.warmup, min_ratio = b_config.schedule.min_ratio })
      assert.equal(3, #b)
      assert.equal(a[3].loss, b[3].loss)
      helpers.sh("rm -rf " .. dir)
   end)
end)

describe("a recipe's own presets", function()
   it("join the library's, complete or changing a library preset", function()
      local all, names = presets.with({ mini = { base = "tiny", n_layer = 1, lr = 1e-3 },
         full = { n_layer = 2, n_embd = 16, n_head = 2, seq = 8, batch = 2, steps = 3,
                  lr = 1e-2, warmup = 0, eval_every = 0 } })
      assert.same({ "tiny", "small", "wide", "gpt2", "gpt2-medium", "moe", "full", "mini" }, names)
      assert.same({ 1, 64, 32, 1e-3, 1e-3 }, { all.mini.n_layer, all.mini.n_embd, all.mini.seq,
         all.mini.lr, all.mini.adamw_lr })
      assert.equal(50257, all.full.vocab)
      assert.equal(presets.presets.small, all.small)
   end)

   it("are refused by name when they cannot be used", function()
      local function refuses(own, message)
         local ok, err = pcall(presets.with, own)
         assert.is_false(ok)
         assert.equal(message, err)
      end
      refuses({ small = { base = "tiny" } }, "recipe preset 'small': the name of a library "
         .. "preset (tiny, small, wide, gpt2, gpt2-medium, moe)")
      refuses({ x = { base = "huge" } }, "recipe preset 'x': base 'huge' is not a library preset "
         .. "(tiny, small, wide, gpt2, gpt2-medium, moe)")
      refuses({ x = { base = "tiny", layers = 2 } }, "recipe preset 'x': unknown key 'layers'")
      refuses({ x = { n_layer = 2 } }, "recipe preset 'x': n_embd must be a number > 0, got nil")
      refuses({ x = { base = "tiny", n_head = 3 } }, "recipe preset 'x': n_head 3 does not "
         .. "divide n_embd 64")
   end)

   it("are --preset choices of the recipe that declares them", function()
      local script = os.tmpname() .. ".lua"
      local f = assert(io.open(script, "w"))
      f:write(([[
package.path = "%s/lua/?.lua;%s/lua/?/init.lua;%s/build/lua/?.lua;" .. package.path
local lw = require("lwopt")
lw.comm.run(function(...)
   require("lwopt.app.recipe").main({ ... }, nil, arg[0],
      { presets = { mini = { base = "tiny", n_layer = 1, steps = 2 } } })
end, ...)
]]):format(root, root, root))
      f:close()
      local run = "cd /tmp && luajit " .. script .. " --data " .. root .. "/data/kjv.txt "
      local out, status = helpers.sh(run .. "--preset mini --sample 0 --eval-max 1 --warmup 0 "
         .. "--progress lines")
      assert.equal(0, status, out)
      assert.matches("GPT 1 layers x 64, 4 heads", out, 1, true)
      out = helpers.sh(run .. "--help")
      assert.matches("--preset {tiny|small|wide|gpt2|gpt2-medium|moe|mini}", out, 1, true)
      os.remove(script)
   end)
end)
