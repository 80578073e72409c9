// Rebuilds CCIPLocalSimulator.json and CCIPTestReceiver.json (ABI + bytecode) from
// Chainlink Local's sources. Not run by CI; the outputs are committed. Usage:
//   mkdir -p /tmp/ccipsrc && cd /tmp/ccipsrc
//   npm pack @chainlink/local@0.2.9 @chainlink/contracts-ccip@1.6.2 @chainlink/contracts@1.5.0
//   for f in *.tgz; do d=${f%.tgz}; mkdir -p $d && tar xzf $f -C $d; done
//   mkdir solcdir && (cd solcdir && npm init -y && npm install solc@0.8.24)
//   NODE_PATH=/tmp/ccipsrc/solcdir/node_modules node tests/ccip/contracts/build.js /tmp/ccipsrc
// (`npm install @chainlink/local` itself fails here: a dependency of
// @chainlink/contracts is fetched from a git host.)
const fs = require("fs");
const path = require("path");
const solc = require("solc");

const src = process.argv[2] || "/tmp/ccipsrc";
const local = path.join(src, "chainlink-local-0.2.9/package");
const prefixes = {
  "@chainlink/contracts-ccip/": path.join(src, "chainlink-contracts-ccip-1.6.2/package/"),
  "@chainlink/contracts/": path.join(src, "chainlink-contracts-1.5.0/package/"),
};
const here = __dirname;

function findImports(p) {
  for (const [prefix, dir] of Object.entries(prefixes)) {
    if (p.startsWith(prefix)) return { contents: fs.readFileSync(dir + p.slice(prefix.length), "utf8") };
  }
  for (const base of [local, here]) {
    const f = path.join(base, p);
    if (fs.existsSync(f)) return { contents: fs.readFileSync(f, "utf8") };
  }
  return { error: "not found: " + p };
}

const input = {
  language: "Solidity",
  sources: {
    "src/ccip/CCIPLocalSimulator.sol": { content: fs.readFileSync(path.join(local, "src/ccip/CCIPLocalSimulator.sol"), "utf8") },
    "CCIPTestReceiver.sol": { content: fs.readFileSync(path.join(here, "CCIPTestReceiver.sol"), "utf8") },
  },
  settings: {
    optimizer: { enabled: true, runs: 200 },
    outputSelection: { "*": { "*": ["abi", "evm.bytecode.object"] } },
  },
};
const out = JSON.parse(solc.compile(JSON.stringify(input), { import: findImports }));
const errors = (out.errors || []).filter((e) => e.severity === "error");
if (errors.length) { console.error(errors.map((e) => e.formattedMessage).join("\n")); process.exit(1); }
const wanted = {
  "src/ccip/CCIPLocalSimulator.sol": "CCIPLocalSimulator",
  "CCIPTestReceiver.sol": "CCIPTestReceiver",
  "src/ccip/BurnMintERC677Helper.sol": "BurnMintERC677Helper",
  "src/vendor/chainlink-ccip/test/mocks/MockRouter.sol": "MockCCIPRouter",
};
for (const [file, name] of Object.entries(wanted)) {
  const c = out.contracts[file][name];
  const body = { abi: c.abi, bytecode: "0x" + c.evm.bytecode.object, compiler: "solc " + solc.version() };
  fs.writeFileSync(path.join(here, name + ".json"), JSON.stringify(body) + "\n");
  console.log(name, c.evm.bytecode.object.length / 2, "bytes");
}
