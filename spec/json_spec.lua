-- json_spec.lua: the JSON encoder, read back by an independent decoder (dkjson).
local json = require("lwopt.json")
local dkjson = require("dkjson")

describe("lw.json.encode", function()
   it("writes objects with sorted keys so equal values give equal text", function()
      assert.equal('{"a":1,"b":[true,false],"c":"x"}', json.encode({ c = "x", a = 1, b = { true, false } }))
   end)

   it("writes integers exactly and other numbers round-trippably", function()
      assert.equal("124373760", json.encode(124373760))
      assert.equal("1099511627777", json.encode(2 ^ 40 + 1))
      assert.equal(0.1, dkjson.decode(json.encode(0.1)))
      assert.equal("null", json.encode(0 / 0))
   end)

   it("escapes strings", function()
      local s = 'quote " backslash \\ newline \n tab \t bell \7'
      assert.equal(s, dkjson.decode(json.encode(s)))
   end)

   it("tells empty objects from empty arrays when marked, and writes null", function()
      assert.equal("[]", json.encode({}))
      assert.equal("{}", json.encode(json.object()))
      assert.equal('{"x":null}', json.encode({ x = json.null }))
   end)

   it("pretty-prints with an indent", function()
      assert.equal('{\n  "a": [\n    1\n  ]\n}', json.encode({ a = { 1 } }, "  "))
   end)

   it("refuses values JSON cannot hold", function()
      assert.has_error(function() json.encode({ [true] = 1 }) end,
         "json.encode: object key true is not a string")
      assert.has_error(function() json.encode(print) end, "json.encode: cannot encode a function")
   end)
end)
