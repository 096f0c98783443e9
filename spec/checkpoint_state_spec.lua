-- checkpoint_state_spec.lua: lw.checkpoint's optimizer state (checkpoint/state.lua) on one rank
-- for a rule whose state has a part per line of the matrix (NorMuon's v): saved at its own
-- count and resumed exactly, and a matrix moved between Muon and NorMuon (momentum carried, v
-- fresh or dropped, each said on stderr), also through the recipe's --resume. Resharding over
-- ranks: tests/lua/ckpt_consistency.lua.
local ffi = require("ffi")
local helpers = require("helpers")
local ch = require("checkpoint_helpers")
local lw = require("lwopt")
local C = require("lwopt.C")
local safetensors = require("lwopt.safetensors")

local function rules(matrices)
   return { { match = "ln_", optimizer = "adamw" },
            { match = "h%.0%..*weight$", optimizer = matrices },
            { match = ".", optimizer = "adamw" } }
end

-- A small GPT on one rank, h.0's matrices optimized by `matrices`.
local function setup(matrices) return ch.setup(rules(matrices)) end
local step, snapshot = ch.step, ch.snapshot

-- name -> { part = { floats } } of every entry of a rule, and the entries' shapes
local function states(ddp, opt, rule)
   local out, entry = {}, ffi.new("lw_state_entry")
   for k = 0, C.lib.lw_optimizer_state_count(opt._c) - 1 do
      C.check(C.lib.lw_optimizer_state(opt._c, k, entry), "test")
      local kind = lw.optim.kinds[C.name("optimizer_kind", entry.optimizer)]
      if kind.name == rule then
         local parts = {}
         for i, part in ipairs(kind.parts) do
            local t = {}
            for j = 0, tonumber(entry.part_counts[i - 1]) - 1 do
               t[j + 1] = entry.parts[i - 1][j]
            end
            parts[part] = t
         end
         out[ddp.specs[entry.param + 1].name] = parts
      end
   end
   return out
end

-- load(path, ...) with what it writes to stderr collected
local function load_quoting(path, ddp, opt)
   local said, stderr = {}, io.stderr
   io.stderr = { write = function(_, s) said[#said + 1] = s end }
   local ok, err = pcall(lw.checkpoint.load, path, { ddp = ddp, opt = opt })
   io.stderr = stderr
   assert(ok, err)
   return table.concat(said)
end

describe("lw.checkpoint's optimizer state", function()
   local dir
   before_each(function() dir = helpers.fresh_path() end)
   after_each(function() os.execute("rm -rf " .. dir) end)

   it("saves NorMuon's v at one float per line and resumes a NorMuon run exactly", function()
      local model, ddp, opt = setup("normuon")
      step(model, ddp, opt)
      local path = lw.checkpoint.save(dir, { ddp = ddp, opt = opt, step = 1 })
      local st = safetensors.open(path .. "/optim-r00000.safetensors", "test")
      local saved = states(ddp, opt, "normuon")
      local n = 0
      for name, parts in pairs(saved) do
         local v = safetensors.find(st, "v/" .. name)
         assert.is_not_nil(v, name)
         assert.equal(4 * #parts.v, tonumber(v.bytes), name)
         assert.is_true(#parts.v < #parts.m / 4, name) -- per line, not per element
         assert.is_true(parts.v[1] > 0, name)
         n = n + 1
      end
      assert.is_true(n >= 2)
      step(model, ddp, opt)
      local model2, ddp2, opt2 = setup("normuon")
      lw.checkpoint.load(path, { ddp = ddp2, opt = opt2 })
      assert.same(saved, states(ddp2, opt2, "normuon"))
      step(model2, ddp2, opt2)
      assert.same(snapshot(ddp), snapshot(ddp2))
   end)

   it("resumes Muon's checkpoint into NorMuon: the momentum carried, v from zero, said once per "
      .. "matrix", function()
      local model, ddp, opt = setup("muon")
      step(model, ddp, opt)
      local path = lw.checkpoint.save(dir, { ddp = ddp, opt = opt, step = 1 })
      local muon = states(ddp, opt, "muon")
      local _, ddp2, opt2 = setup("normuon")
      local said = load_quoting(path, ddp2, opt2)
      local normuon = states(ddp2, opt2, "normuon")
      local n = 0
      for name, parts in pairs(muon) do
         assert.same(parts.m, normuon[name].m)
         for _, x in ipairs(normuon[name].v) do assert.equal(0, x) end
         assert.matches(("'%s' was optimized by muon; normuon starts its second moment fresh\n")
            :format(name:gsub("%p", "%%%0")), said)
         n = n + 1
      end
      assert.equal(n, select(2, said:gsub("\n", "")))
   end)

   it("resumes NorMuon's checkpoint into Muon, dropping v and saying so", function()
      local model, ddp, opt = setup("normuon")
      step(model, ddp, opt)
      local path = lw.checkpoint.save(dir, { ddp = ddp, opt = opt, step = 1 })
      local normuon = states(ddp, opt, "normuon")
      local _, ddp2, opt2 = setup("muon")
      local said = load_quoting(path, ddp2, opt2)
      for name, parts in pairs(states(ddp2, opt2, "muon")) do
         assert.same(normuon[name].m, parts.m)
         assert.matches(("'%s' was optimized by normuon; muon drops its second moment")
            :format(name:gsub("%p", "%%%0")), said)
      end
   end)

   it("refuses NorMuon's state into another rule, naming both", function()
      local model, ddp, opt = setup("normuon")
      step(model, ddp, opt)
      local path = lw.checkpoint.save(dir, { ddp = ddp, opt = opt, step = 1 })
      local _, ddp2, opt2 = setup("adamw")
      local ok, err = pcall(lw.checkpoint.load, path, { ddp = ddp2, opt = opt2 })
      assert.is_false(ok)
      assert.matches("'h.0.attn.qkv.weight' was optimized by normuon in .*, by adamw now", err)
   end)

   it("lets the recipe resume Muon's run with --optimizer normuon, noting the change", function()
      local recipe = "cd /tmp && luajit " .. assert(io.popen("pwd")):read("*l")
         .. "/recipes/gpt_small.lua --preset tiny --sample 0 --quiet --ckpt-dir " .. dir
      local out, status = helpers.sh(recipe .. " --steps 4 --stop-after 2")
      assert.equal(0, status, out)
      out, status = helpers.sh(recipe .. " --steps 4 --optimizer normuon --resume")
      assert.equal(0, status, out)
      assert.matches("--optimizer normuon (was muon)", out, 1, true)
      assert.matches("'h.0.attn.qkv.weight' was optimized by muon; normuon starts its second "
         .. "moment fresh", out, 1, true)
      out, status = helpers.sh(recipe .. " --steps 4 --optimizer adamw --resume")
      assert.equal(1, status)
      assert.matches("--optimizer adamw, but the checkpoint was trained with --optimizer "
         .. "normuon", out, 1, true)
   end)
end)
