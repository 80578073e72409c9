// Rebuilds CctpLocal.json (ABI + bytecode of TestUSDC, MessageTransmitter, TokenMessenger)
// from CctpLocal.sol. Not run by CI; the output is committed. Usage:
//   mkdir -p /tmp/cctpsolc && cd /tmp/cctpsolc && npm init -y && npm install solc@0.8.24
//   NODE_PATH=/tmp/cctpsolc/node_modules node tests/cctp/contracts/build.js
const fs = require("fs");
const path = require("path");
const solc = require("solc");

const here = __dirname;
const input = {
  language: "Solidity",
  sources: { "CctpLocal.sol": { content: fs.readFileSync(path.join(here, "CctpLocal.sol"), "utf8") } },
  settings: {
    optimizer: { enabled: true, runs: 200 },
    viaIR: false,
    outputSelection: { "*": { "*": ["abi", "evm.bytecode.object"] } },
  },
};
const out = JSON.parse(solc.compile(JSON.stringify(input)));
const errors = (out.errors || []).filter((e) => e.severity === "error");
if (errors.length) { console.error(errors.map((e) => e.formattedMessage).join("\n")); process.exit(1); }
const result = {};
for (const name of ["TestUSDC", "MessageTransmitter", "TokenMessenger"]) {
  const c = out.contracts["CctpLocal.sol"][name];
  result[name] = { abi: c.abi, bytecode: "0x" + c.evm.bytecode.object };
}
fs.writeFileSync(path.join(here, "CctpLocal.json"), JSON.stringify(result) + "\n");
console.log("wrote CctpLocal.json");
