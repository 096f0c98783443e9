-- logs_spec.lua: reading training logs (lua/lwopt/logs/init.lua) on small logs written here: a
-- configuration record, step records, a resumed run appending to its log, and a log from before
-- configuration records. The commands over them are cli_logs_spec.lua's.
local logs = require("lwopt.logs")
local json = require("lwopt.json")
local helpers = require("helpers")

local config, step, write_log = helpers.log_config, helpers.log_step, helpers.write_log

describe("lwopt.logs", function()
   local dir
   before_each(function() dir = helpers.tempdir() end)
   after_each(function() os.execute("rm -rf " .. dir) end)

   local function two_runs() return helpers.two_logs(dir) end

   it("reads the configuration records apart from the steps, the last record of each step",
      function()
      local _, b = two_runs()
      local log = logs.read(b)
      assert.equal("b", log.name)
      assert.equal(2, #log.configs)
      assert.equal(2, log.configs[2].start_step)
      assert.equal(6, #log.steps)
      for i, rec in ipairs(log.steps) do assert.equal(i, rec.step) end
      assert.equal(3.75, log.steps[2].loss) -- the resumed run's step 2, not the first one's
      assert.same({ 2, 5 }, { #log.segments[1].steps, #log.segments[2].steps })
   end)

   it("refuses a line that is not a JSON object, naming the file and line", function()
      local path = dir .. "/bad.jsonl"
      local f = assert(io.open(path, "w"))
      f:write(json.encode(json.object(step(1, 5))), "\n", '{"step": 2, "loss"\n')
      f:close()
      assert.has_error(function() logs.read(path) end)
      local ok, err = pcall(logs.read, path)
      assert.is_false(ok)
      assert.matches("^" .. path:gsub("%p", "%%%0") .. ":2: not a JSON record", err)
      ok, err = pcall(logs.read, dir .. "/none.jsonl")
      assert.matches("^cannot read .*none%.jsonl: No such file or directory$", err)
   end)

   it("summarises a run: last step, tokens, final losses, median rate, peak memory, wall time",
      function()
      local a, b = two_runs()
      local s = logs.summary(logs.read(a))
      assert.same({ "a", 4, 1024, 4.5, 4.75, 2500, 24, 4 }, { s.name, s.steps, s.tokens, s.loss,
         s.val_loss, s.tokens_per_s, s.peak_mb, s.wall_s })
      assert.is_nil(s.gpu_mb)
      s = logs.summary(logs.read(b))
      -- wall time: the first run to its step 2 (1002 - 1000), the resumed one to step 6
      assert.same({ 6, 6 * 256, 3.25, 3.5, 3500, 26, 2 + 6 }, { s.steps, s.tokens, s.loss,
         s.val_loss, s.tokens_per_s, s.peak_mb, s.wall_s })
   end)

   it("counts tokens from the configuration when the steps do not, and leaves out what a log "
      .. "does not say", function()
      local path = write_log(dir .. "/old.jsonl", { config({ tokens_per_step = 100 }),
         step(1, 5, { tokens = json.null }), step(2, 5, { tokens = json.null }) })
      assert.equal(200, logs.summary(logs.read(path)).tokens)
      -- before configuration records: no tokens, no wall time
      path = write_log(dir .. "/older.jsonl", { step(1, 5, { tokens = json.null,
         wall_time = json.null }) })
      local s = logs.summary(logs.read(path))
      assert.same({ 1, 4.875 }, { s.steps, s.loss })
      assert.is_nil(s.tokens)
      assert.is_nil(s.wall_s)
   end)

end)
