-- checkpoint_spec.lua: checkpoints on one rank: the directory format, the hook points of a
-- save, keep-K pruning, weights-only loading, an independent reader of model.safetensors, and a
-- clear error for every corruption (the MPI round trips and resharding are in
-- tests/lua/ckpt_consistency.lua).
local ffi = require("ffi")
local lw = require("lwopt")
local helpers = require("helpers")
local ch = require("checkpoint_helpers")

local setup, step, snapshot = ch.setup, ch.step, ch.snapshot

-- Rewrites a checkpoint's manifest.json through edit(text) -> text; returns the new text.
local function edit_manifest(path, edit)
   local f = assert(io.open(path .. "/manifest.json"))
   local text = edit(f:read("*a"))
   f:close()
   f = assert(io.open(path .. "/manifest.json", "w"))
   f:write(text)
   f:close()
   return text
end

-- Rewrites a checkpoint's manifest through edit(m) on its decoded table, sealed again with its
-- own checksum the way lwopt seals it: a manifest anyone could have written.
local function reseal(path, edit)
   local json = require("lwopt.json")
   local f = assert(io.open(path .. "/manifest.json"))
   local m = json.decode(f:read("*a"))
   f:close()
   edit(m)
   m.manifest_crc32c = "00000000"
   local text = json.encode(m, "  ") .. "\n"
   local crc = ("%08x"):format(require("lwopt.C").lib.lw_crc32c(0, text, #text))
   text = text:gsub('"manifest_crc32c": "00000000"', '"manifest_crc32c": "' .. crc .. '"')
   f = assert(io.open(path .. "/manifest.json", "w"))
   f:write(text)
   f:close()
end

-- Runs lua (a chunk with lw loaded) in a process of its own, bounded by `timeout`: what would
-- hang a load (a FIFO, a device) fails the test instead of hanging the suite. Its output.
local function bounded(lua)
   local script = helpers.tempfile("package.path = 'lua/?.lua;lua/?/init.lua;build/lua/?.lua;' "
      .. ".. package.path\nlocal lw = require('lwopt')\n" .. lua)
   local out, status = helpers.sh("timeout 60 luajit " .. script)
   os.remove(script)
   return out, status
end

describe("lw.checkpoint", function()
   local dir
   before_each(function() dir = helpers.fresh_path() end)
   after_each(function() os.execute("rm -rf " .. dir) end)

   it("saves a directory of model, optimizer state and manifest, and resumes exactly", function()
      local model, ddp, opt = setup()
      step(model, ddp, opt)
      local path = lw.checkpoint.save(dir, { ddp = ddp, opt = opt, step = 1, extra = { seed = 5 } })
      assert.equal(dir .. "/step-000000001", path)
      assert.equal(path, lw.checkpoint.latest(dir))
      for _, f in ipairs({ "model.safetensors", "optim-r00000.safetensors", "manifest.json" }) do
         assert.is_not_nil(io.open(path .. "/" .. f), f)
      end
      step(model, ddp, opt)
      local expect = snapshot(ddp)
      -- a second run from the checkpoint takes the same step
      local model2, ddp2, opt2 = setup()
      local m = lw.checkpoint.load(path, { ddp = ddp2, opt = opt2 })
      assert.equal(1, m.step)
      assert.equal(5, m.extra.seed)
      step(model2, ddp2, opt2)
      assert.same(expect, snapshot(ddp2))
   end)

   describe("hook points", function()
      after_each(function() lw.checkpoint.on_point = nil end)

      it("are called in the protocol's order, the save's own hook before the module's", function()
         local model, ddp, opt = setup()
         step(model, ddp, opt)
         local calls, seen = {}, {}
         local function exists(path)
            local f = io.open(path)
            if f then f:close() end
            return f ~= nil
         end
         local final = dir .. "/step-000000001"
         lw.checkpoint.on_point = function(point) calls[#calls + 1] = "module " .. point end
         lw.checkpoint.save(dir, { ddp = ddp, opt = opt, step = 1, on_point = function(point, s)
            calls[#calls + 1] = "save " .. point
            assert.equal(1, s.step)
            seen[point] = { tmp_manifest = exists(final .. ".tmp/manifest.json"),
                            model = exists(final .. ".tmp/model.safetensors"),
                            final = exists(final .. "/manifest.json"),
                            latest = exists(dir .. "/latest") }
         end })
         assert.same({ "optim", "model", "manifest", "rename" }, lw.checkpoint.POINTS)
         local want = {}
         for _, point in ipairs(lw.checkpoint.POINTS) do
            want[#want + 1] = "save " .. point
            want[#want + 1] = "module " .. point
         end
         assert.same(want, calls)
         assert.same({ tmp_manifest = false, model = false, final = false, latest = false },
            seen.optim)
         assert.same({ tmp_manifest = false, model = true, final = false, latest = false },
            seen.model)
         assert.same({ tmp_manifest = true, model = true, final = false, latest = false },
            seen.manifest)
         assert.same({ tmp_manifest = false, model = false, final = true, latest = false },
            seen.rename)
      end)

      it("fail the save with an error raised there, leaving the previous checkpoint", function()
         local model, ddp, opt = setup()
         step(model, ddp, opt)
         lw.checkpoint.save(dir, { ddp = ddp, opt = opt, step = 1 })
         lw.checkpoint.on_point = function(point)
            if point == "manifest" then error("stopped at the manifest", 0) end
         end
         assert.has_error(function()
            lw.checkpoint.save(dir, { ddp = ddp, opt = opt, step = 2 })
         end, "stopped at the manifest")
         assert.equal(dir .. "/step-000000001", lw.checkpoint.latest(dir))
      end)
   end)

   it("keeps the newest K checkpoints of its run", function()
      local model, ddp, opt = setup()
      for s = 1, 4 do
         step(model, ddp, opt)
         lw.checkpoint.save(dir, { ddp = ddp, opt = opt, step = s, keep = 2, run_id = "a" })
      end
      local out = helpers.sh("ls " .. dir)
      assert.equal("latest\nstep-000000003\nstep-000000004\n", out)
   end)

   describe("pruning", function()
      local model, ddp, opt
      before_each(function() model, ddp, opt = setup() end)
      local function save(s, run_id, protect)
         return lw.checkpoint.save(dir, { ddp = ddp, opt = opt, step = s, keep = 3,
            run_id = run_id, protect = protect })
      end
      local function listing() return (helpers.sh("ls " .. dir):gsub("\n", " ")) end
      local function latest() return (helpers.sh("cat " .. dir .. "/latest"):gsub("%s", "")) end

      it("never deletes another run's checkpoints, nor what latest names", function()
         for _, s in ipairs({ 10, 15, 20 }) do save(s, "other") end
         for s = 2, 6, 2 do save(s, "mine") end
         assert.equal("step-000000006", latest())
         assert.equal("latest step-000000002 step-000000004 step-000000006 step-000000010 "
            .. "step-000000015 step-000000020 ", listing())
         save(8, "mine")
         assert.equal("latest step-000000004 step-000000006 step-000000008 step-000000010 "
            .. "step-000000015 step-000000020 ", listing())
         assert.equal("step-000000008", latest())
      end)

      it("keeps the one best names, and moves best only with a save marked best", function()
         local function at(s, best)
            return lw.checkpoint.save(dir, { ddp = ddp, opt = opt, step = s, keep = 1,
               run_id = "mine", best = best })
         end
         assert.is_nil(lw.checkpoint.best(dir))
         at(1, true)
         at(2)
         at(3)
         assert.equal(dir .. "/step-000000001", lw.checkpoint.best(dir))
         assert.equal("best latest step-000000001 step-000000003 ", listing())
         at(4, true)
         at(5)
         -- step 1 is no longer the best: pruned as keep says
         assert.equal("best latest step-000000004 step-000000005 ", listing())
         assert.equal(dir .. "/step-000000004", lw.checkpoint.best(dir))
         assert.equal("step-000000005", latest())
         assert.is_true(lw.checkpoint.writes_name("best"))
         assert.is_true(lw.checkpoint.writes_name("best.tmp"))
      end)

      it("keeps the checkpoint a rolled-back run resumed from", function()
         for _, s in ipairs({ 10, 15, 20 }) do save(s, "mine") end
         -- the user points latest at step 10 and resumes from it
         helpers.sh("echo step-000000010 > " .. dir .. "/latest")
         local from = { dir .. "/step-000000010" }
         for _, s in ipairs({ 11, 12, 13, 14 }) do save(s, "mine", from) end
         assert.matches("step%-000000010", listing())
         assert.matches("step%-000000014", listing())
         assert.equal("step-000000014", latest())
         -- the abandoned future (15, 20) is not older than the step just written: it stays
         assert.matches("step%-000000020", listing())
         assert.is_nil(listing():find("step-000000011", 1, true))
      end)

      it("leaves directories that are not checkpoints, and removes interrupted saves", function()
         helpers.sh("mkdir -p " .. dir .. "/step-000000001 " .. dir .. "/step-000000003.tmp "
            .. dir .. "/notes && echo hi > " .. dir .. "/step-000000001/mine.txt")
         for s = 4, 8 do save(s, "mine") end
         assert.equal("latest notes step-000000001 step-000000006 step-000000007 step-000000008 ",
            listing())
      end)

      it("does not prune without a run id (checkpoints of the previous format version)", function()
         for s = 1, 5 do save(s, nil) end
         assert.equal("latest step-000000001 step-000000002 step-000000003 step-000000004 "
            .. "step-000000005 ", listing())
      end)
   end)

   describe("finding the checkpoint to resume", function()
      it("says why there is none", function()
         local found, why = lw.checkpoint.find(dir)
         assert.is_nil(found)
         assert.equal(dir .. " does not exist", why)
         helpers.sh("mkdir -p " .. dir)
         found, why = lw.checkpoint.find(dir)
         assert.is_nil(found)
         assert.equal(dir .. " holds no checkpoint", why)
         assert.is_false(lw.checkpoint.holds(dir))
      end)

      it("takes the one latest names, or the newest when latest is missing or dangling", function()
         local model, ddp, opt = setup()
         for s = 1, 3 do
            step(model, ddp, opt)
            lw.checkpoint.save(dir, { ddp = ddp, opt = opt, step = s, keep = 5, run_id = "a" })
         end
         helpers.sh("echo step-000000002 > " .. dir .. "/latest")
         local found = lw.checkpoint.find(dir)
         assert.equal(2, found.step)
         assert.is_nil(found.note)
         os.remove(dir .. "/latest")
         found = lw.checkpoint.find(dir)
         assert.equal(3, found.step)
         assert.equal(dir .. "/latest is missing; using step-000000003, the newest whole "
            .. "checkpoint of the run of the newest manifest (run a)", found.note)
         helpers.sh("echo step-000000009 > " .. dir .. "/latest")
         found = lw.checkpoint.find(dir)
         assert.equal(3, found.step)
         assert.matches("latest names step-000000009, which is missing; using step-000000003",
            found.note, 1, true)
         assert.has_error(function() lw.checkpoint.find(dir, { strict = true }) end,
            "checkpoint: " .. dir .. "/latest names step-000000009, which is missing; a strict "
            .. "resume takes only the checkpoint latest names")
         local holds, what = lw.checkpoint.holds(dir)
         assert.is_true(holds)
         assert.equal("3 checkpoints, the newest step-000000003", what)
      end)

      it("without latest, continues the run saved last, not the one with the highest step",
         function()
         local model, ddp, opt = setup()
         step(model, ddp, opt)
         for _, save in ipairs({ { 10, "old" }, { 20, "old" }, { 4, "new" }, { 8, "new" } }) do
            lw.checkpoint.save(dir, { ddp = ddp, opt = opt, step = save[1], keep = 5,
               run_id = save[2] })
         end
         local m = lw.checkpoint.read_manifest(dir .. "/step-000000008")
         assert.is_true(m.saved_at > lw.checkpoint.read_manifest(dir .. "/step-000000020").saved_at)
         assert.is_true(math.abs(m.saved_at - os.time()) < 60)
         os.remove(dir .. "/latest")
         local found = lw.checkpoint.find(dir)
         assert.equal(8, found.step)
         assert.equal(dir .. "/latest is missing; using step-000000008, the newest whole "
            .. "checkpoint of the run of the newest manifest (run new); passed over, another "
            .. "run's: step-000000010, step-000000020 of run old", found.note)
         helpers.sh("echo step-000000008 > " .. dir .. "/latest")
         helpers.sh("truncate -s 10 " .. dir .. "/step-000000008/model.safetensors")
         found = lw.checkpoint.find(dir)
         assert.equal(4, found.step)
         assert.matches("latest names step-000000008, which is damaged (checkpoint.load: ",
            found.note, 1, true)
         assert.matches("; using step-000000004, the newest whole checkpoint of its run (run new)",
            found.note, 1, true)
      end)
   end)

   it("loads a checkpoint of format version 1 (no run id, no manifest checksum)", function()
      local model, ddp, opt = setup()
      step(model, ddp, opt)
      local path = lw.checkpoint.save(dir, { ddp = ddp, opt = opt, step = 1, run_id = "a" })
      local text = edit_manifest(path, function(t)
         return (t:gsub('"version": 2', '"version": 1'):gsub('\n  "manifest_crc32c": "%x+",', "")
            :gsub('\n  "run_id": "a",', ""))
      end)
      assert.is_nil(text:find("manifest_crc32c", 1, true))
      local _, ddp2, opt2 = setup()
      local m = lw.checkpoint.load(path, { ddp = ddp2, opt = opt2 })
      assert.equal(1, m.version)
      assert.same(snapshot(ddp), snapshot(ddp2))
   end)

   it("loads weights only, with a fresh optimizer", function()
      local model, ddp, opt = setup()
      step(model, ddp, opt)
      local path = lw.checkpoint.save(dir, { ddp = ddp, opt = opt, step = 1 })
      local _, ddp2 = setup()
      lw.checkpoint.load(path, { ddp = ddp2, weights_only = true })
      assert.same(snapshot(ddp), snapshot(ddp2))
   end)

   it("writes model.safetensors that an independent reader (python3 + numpy) loads", function()
      local model, ddp, opt = setup()
      step(model, ddp, opt)
      local path = lw.checkpoint.save(dir, { ddp = ddp, opt = opt, step = 1 })
      local expect = ddp:param("h.0.mlp.fc.weight"):totable()
      local t = helpers.read_safetensors(path .. "/model.safetensors", "h.0.mlp.fc.weight")
      assert.same({ 64, 16 }, t.shape)
      assert.equal(expect[1], t.first)
      assert.equal(expect[#expect], t.last)
   end)

   describe("refuses a damaged or foreign checkpoint, naming the file", function()
      local path, ddp2, opt2
      before_each(function()
         local model, ddp, opt = setup()
         step(model, ddp, opt)
         path = lw.checkpoint.save(dir, { ddp = ddp, opt = opt, step = 1 })
         local _
         _, ddp2, opt2 = setup()
      end)

      local function fails(message)
         local before = snapshot(ddp2)
         local ok, err = pcall(lw.checkpoint.load, path, { ddp = ddp2, opt = opt2 })
         assert.is_false(ok)
         assert.matches(message, err, 1, true)
         assert.same(before, snapshot(ddp2)) -- nothing was overwritten
      end

      it("a missing file", function()
         os.remove(path .. "/optim-r00000.safetensors")
         fails("optim-r00000.safetensors: missing or unreadable")
      end)

      it("a truncated file", function()
         helpers.sh("truncate -s -10 " .. path .. "/model.safetensors")
         fails("model.safetensors has ")
         fails("(truncated?)")
      end)

      it("a flipped bit", function()
         local f = assert(io.open(path .. "/model.safetensors", "r+b"))
         f:seek("set", 500)
         local byte = f:read(1):byte()
         f:seek("set", 500)
         f:write(string.char(bit.bxor(byte, 4)))
         f:close()
         fails("model.safetensors fails its checksum")
      end)

      it("another model", function()
         local other = lw.nn.GPT.new{ n_layer = 1, n_embd = 16, n_head = 2, vocab = 48, seq_len = 8 }
         ddp2 = lw.ddp.new(other:parameters(), lw.comm.self())
         opt2 = lw.optim.new(ddp2, {})
         fails("'wte.weight' has shape {32, 16} in " .. path .. " but {48, 16} in the model")
      end)

      it("an unknown format version", function()
         edit_manifest(path, function(t) return (t:gsub('"version": 2', '"version": 7')) end)
         fails("has format version 7; this lwopt reads versions 1 and 2")
      end)

      it("an edited manifest", function()
         edit_manifest(path, function(t) return (t:gsub('"step": 1', '"step": 5')) end)
         fails("manifest.json fails its own checksum: it was edited or corrupted")
      end)

      it("a directory that is not a checkpoint, or a broken manifest", function()
         path = dir
         fails("is not a checkpoint (no manifest.json)")
         path = dir .. "/step-000000001"
         local f = assert(io.open(path .. "/manifest.json", "w"))
         f:write('{"format": "lwopt-checkpoint", ')
         f:close()
         fails("manifest.json: json.decode: json:")
      end)
   end)

   describe("in a directory that others write too", function()
      local model, ddp, opt, victim
      before_each(function()
         model, ddp, opt = setup()
         victim = helpers.fresh_path()
         helpers.sh(("mkdir -p %s && echo keep > %s/precious.txt"):format(victim, victim))
      end)
      after_each(function() os.execute("rm -rf " .. victim) end)
      local function untouched()
         assert.equal("keep\n", helpers.sh("cat " .. victim .. "/precious.txt"))
      end
      local function save(s, keep)
         return lw.checkpoint.save(dir, { ddp = ddp, opt = opt, step = s, keep = keep or 1,
            run_id = "mine" })
      end

      it("never removes or writes what a symbolic link there points to", function()
         save(1)
         -- links planted where saves and pruning work: an older interrupted save, the step
         -- about to be saved, inside a checkpoint that pruning removes, and latest.tmp
         local plant = ("ln -s %s %s/step-000000000.tmp && ln -s %s %s/step-000000002.tmp && "
            .. "ln -s %s %s/step-000000001/inside && ln -s %s/precious.txt %s/latest.tmp")
            :format(victim, dir, victim, dir, victim, dir, victim, dir)
         assert.equal(0, select(2, helpers.sh(plant)))
         save(2)
         untouched()
         assert.equal("latest\nstep-000000002\n", helpers.sh("ls " .. dir))
         -- a link named as a checkpoint is not one of lwopt's: neither listed nor pruned
         helpers.sh(("ln -s %s %s/step-000000000"):format(victim, dir))
         save(3)
         untouched()
         assert.equal("latest\nstep-000000000\nstep-000000003\n", helpers.sh("ls " .. dir))
      end)

      it("refuses a lock file that is a symbolic link, writing nothing through it", function()
         helpers.sh(("mkdir -p %s && ln -s %s/precious.txt %s/.lwopt-lock"):format(dir, victim,
            dir))
         local lock, why = lw.checkpoint.lock(dir)
         assert.is_nil(lock)
         assert.matches("is a symbolic link, not a lock file lwopt made: remove it", why, 1, true)
         untouched()
      end)

      it("reads only plain names inside the checkpoint, and regular files only", function()
         local path = save(1)
         helpers.sh("cp " .. path .. "/model.safetensors " .. dir .. "/outside.safetensors")
         for _, name in ipairs({ "../outside.safetensors", dir .. "/outside.safetensors", ".." }) do
            reseal(path, function(m) m.files[1].name = name end)
            local ok, err = pcall(lw.checkpoint.read_manifest, path)
            assert.is_false(ok)
            assert.matches(("manifest.json names a file '%s', which is not a plain name inside "
               .. "the checkpoint"):format(name), err, 1, true)
         end
         reseal(path, function(m) m.files[1].name = "model.safetensors" end)
         assert.is_table(lw.checkpoint.read_manifest(path))
         -- a FIFO (no writer: opening it would wait forever) and a link to /dev/zero (read
         -- forever) in a checkpoint file's place, a FIFO in the manifest's
         local model_file = path .. "/model.safetensors"
         local read = ("print(select(2, pcall(lw.checkpoint.read_manifest, '%s')))"):format(path)
         helpers.sh("rm " .. model_file .. " && mkfifo " .. model_file)
         local out, status = bounded(read)
         assert.equal(0, status, out)
         assert.matches("model.safetensors: missing or unreadable (" .. model_file
            .. " is not a regular file (a FIFO))", out, 1, true)
         helpers.sh("rm " .. model_file .. " && ln -s /dev/zero " .. model_file)
         out, status = bounded(read)
         assert.equal(0, status, out)
         assert.matches(model_file .. " is a symbolic link, not a file lwopt wrote", out, 1, true)
         helpers.sh("rm " .. path .. "/manifest.json && mkfifo " .. path .. "/manifest.json")
         out, status = bounded(read)
         assert.equal(0, status, out)
         assert.matches("manifest.json is not a regular file (a FIFO)", out, 1, true)
      end)

      it("passes over a latest that is a link to a device, without reading it", function()
         local path = save(1)
         helpers.sh("rm " .. dir .. "/latest && ln -s /dev/zero " .. dir .. "/latest")
         local out, status = bounded(("local c = lw.checkpoint.find('%s'); print(c.path, c.note)")
            :format(dir))
         assert.equal(0, status, out)
         assert.matches(path .. "\t" .. dir .. "/latest is a symbolic link, not a file lwopt "
            .. "wrote; using step-000000001, the newest whole checkpoint", out, 1, true)
      end)

      it("refuses an optimizer tensor shorter than the range its file records", function()
         step(model, ddp, opt)
         local path = save(1)
         local safetensors = require("lwopt.safetensors")
         local ffi = require("ffi")
         -- the first AdamW state tensor cut short, its range's metadata kept, the file's size
         -- and checksum in the manifest made to match: everything a checksum can say is fine
         local file = path .. "/optim-r00000.safetensors"
         local st = safetensors.open(file)
         local tensors, metadata, cut = {}, {}, nil
         for _, name in ipairs(safetensors.names(st)) do
            local view = safetensors.find(st, name)
            local count = tonumber(view.bytes) / 4
            if cut == nil and name:match("^v/") then
               cut, count = name, count - 3
            end
            local data = ffi.new("float[?]", count)
            ffi.copy(data, view.data, 4 * count)
            tensors[#tensors + 1] = { name = name, data = data, count = count }
         end
         for _, s in ipairs(ddp.specs) do
            local meta = require("lwopt.C").lib.lw_safetensors_metadata(st, s.name)
            if meta ~= nil then metadata[#metadata + 1] = { s.name, ffi.string(meta) } end
         end
         st = nil
         collectgarbage()
         local bytes, crc = safetensors.write(file, tensors, metadata)
         reseal(path, function(m)
            for _, f in ipairs(m.files) do
               if f.name == "optim-r00000.safetensors" then
                  f.bytes, f.crc32c = bytes, ("%08x"):format(crc)
               end
            end
         end)
         local _, ddp2, opt2 = setup()
         local ok, err = pcall(lw.checkpoint.load, path, { ddp = ddp2, opt = opt2 })
         assert.is_false(ok)
         assert.matches(("optim%%-r00000%%.safetensors: '%s' holds %%d+ values, but its range says "
            .. "%%d+ F32 values: damaged or written by something else"):format(
            cut:gsub("%p", "%%%0")), err)
      end)
   end)

   it("loads a checkpoint written before the optimizer rules were a table: every state part "
      .. "and parameter as its files hold them", function()
      local path = "spec/fixtures/checkpoint_v2/step-000000001" -- written by make.lua there
      local _, ddp, opt = setup()
      local m = lw.checkpoint.load(path, { ddp = ddp, opt = opt })
      assert.equal(1, m.step)
      local safetensors, C = require("lwopt.safetensors"), require("lwopt.C")
      local function same(st, key, ptr, n)
         local view = safetensors.find(st, key)
         assert.is_not_nil(view, key)
         assert.equal(4 * n, tonumber(view.bytes), key)
         assert.is_true(ffi.string(view.data, 4 * n) == ffi.string(ptr, 4 * n), key)
      end
      local model_st = safetensors.open(path .. "/model.safetensors", "test")
      for _, s in ipairs(ddp.specs) do
         local t = ddp:param(s.name)
         same(model_st, s.name, t.data, t.numel)
      end
      local st = safetensors.open(path .. "/optim-r00000.safetensors", "test")
      local entry, seen = ffi.new("lw_state_entry"), { adamw = 0, muon = 0 }
      for k = 0, C.lib.lw_optimizer_state_count(opt._c) - 1 do
         C.check(C.lib.lw_optimizer_state(opt._c, k, entry), "test")
         local name = ddp.specs[entry.param + 1].name
         local kind = lw.optim.kinds[C.name("optimizer_kind", entry.optimizer)]
         assert.equal(#kind.parts, entry.n_parts)
         for i, part in ipairs(kind.parts) do
            same(st, part .. "/" .. name, entry.parts[i - 1], tonumber(entry.count))
         end
         seen[kind.name] = seen[kind.name] + 1
      end
      assert.same({ adamw = 5, muon = 4 }, seen)
   end)

   it("saves and resumes every rule's state by its part names (Lion's m beside Muon's and "
      .. "AdamW's)", function()
      local rules = { { match = "ln_", optimizer = "lion" },
         { match = "h%.0%..*weight$", optimizer = "muon" }, { match = ".", optimizer = "adamw" } }
      local model, ddp, opt = setup(rules)
      step(model, ddp, opt)
      local path = lw.checkpoint.save(dir, { ddp = ddp, opt = opt, step = 1 })
      local st = require("lwopt.safetensors").open(path .. "/optim-r00000.safetensors", "test")
      assert.is_not_nil(require("lwopt.safetensors").find(st, "m/ln_f.weight"))
      assert.is_nil(require("lwopt.safetensors").find(st, "v/ln_f.weight"))
      step(model, ddp, opt)
      local model2, ddp2, opt2 = setup(rules)
      lw.checkpoint.load(path, { ddp = ddp2, opt = opt2 })
      step(model2, ddp2, opt2)
      assert.same(snapshot(ddp), snapshot(ddp2))
      -- the same parameters routed to another rule now: refused by name
      local _, ddp3, opt3 = setup()
      local ok, err = pcall(lw.checkpoint.load, path, { ddp = ddp3, opt = opt3 })
      assert.is_false(ok)
      assert.matches("'h.0.ln_1.weight' was optimized by lion in .*, by adamw now", err)
   end)
end)
