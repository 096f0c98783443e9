-- logs_writer_spec.lua: the training log's writer (lua/lwopt/logs/writer.lua): whole records, a
-- resumed run appending after them, and a write that fails named with its file and reason.
local writer = require("lwopt.logs.writer")
local json = require("lwopt.json")

describe("lwopt.logs.writer", function()
   local path
   before_each(function() path = os.tmpname() end)
   after_each(function() os.remove(path) end)

   local function lines()
      local out = {}
      for line in io.lines(path) do out[#out + 1] = json.decode(line).step end
      return out
   end

   it("writes one JSON line per record, and appends after them when resumed", function()
      local log = writer.open(path, false)
      assert.is_nil(log:write({ step = 1, loss = 5.5 }))
      assert.is_nil(log:write({ step = 2, loss = 5.25 }))
      log:close()
      log = writer.open(path, true)
      assert.is_nil(log:write({ step = 3, loss = 5 }))
      log:close()
      assert.same({ 1, 2, 3 }, lines())
      log = writer.open(path, false) -- a new run starts the file again
      assert.is_nil(log:write({ step = 1, loss = 5.5 }))
      log:close()
      assert.same({ 1 }, lines())
   end)

   it("names the file and the reason when a record cannot be written, and takes no more",
      function()
      local log = writer.open("/dev/full", false)
      local why = log:write({ step = 7, loss = 1 })
      assert.matches("^cannot write the record of step 7 to /dev/full %(No space left on device%)",
         why)
      assert.equal(why, log:write({ step = 8, loss = 1 }))
      log:close()
      log = writer.open("/dev/full", false)
      assert.matches("^cannot write the configuration record to /dev/full %(No space left on "
         .. "device%)", log:write({ kind = "config", host = "h" }))
      log:close()
   end)

   it("refuses a log it cannot open, naming it", function()
      assert.has_error(function() writer.open("/nonexistent/dir/log.jsonl", false) end,
         "train: cannot write the log: /nonexistent/dir/log.jsonl: No such file or directory")
   end)
end)
