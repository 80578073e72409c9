// Executors and signers: health, and each signer's identity posture (expected vs observed).

import { api } from "../api.js";
import { errorBox, h, json, mount, when } from "../dom.js";

const HEALTH = { healthy: "COMPLETED", degraded: "SUBMITTING", unhealthy: "FAILED", unknown: "BLOCKED" };

function health(state) {
  return h("span.badge", { class: `st-${HEALTH[state] || "BLOCKED"}` }, state);
}

export default {
  path: "providers",
  title: "Providers",
  nav: true,
  async render(main) {
    const [executors, signers] = await Promise.all([api("GET", "/v3/executors"), api("GET", "/v3/signers")]);
    mount(main, h("h1", "Executors and signers"));
    if (!executors.ok) main.append(errorBox(executors));
    else {
      main.append(h("h2", "Executors"), h("table.list#executors",
        h("thead", h("tr", ["Executor", "Action types", "Health", "Checked", "Registered", "Detail"].map((t) => h("th", t)))),
        h("tbody", executors.body.items.map((e) => h("tr", { class: e.health_state === "unhealthy" ? "warn" : null },
          h("td.mono", e.executor_key), h("td", e.action_types.join(", ")), h("td", health(e.health_state)),
          h("td", when(e.last_health_at)), h("td", e.registered ? "yes" : "no"),
          h("td", Object.keys(e.health_detail).length ? h("details", h("summary", "detail"), json(e.health_detail)) : ""))))));
    }
    if (!signers.ok) main.append(errorBox(signers));
    else {
      main.append(h("h2", "Signers"), h("table.list#signers",
        h("thead", h("tr", ["Signer", "Health", "Posture", "Observed address", "Expected address", "Set by", "Checked"].map((t) => h("th", t)))),
        h("tbody", signers.body.items.length ? signers.body.items.map((x) => h("tr", { class: x.identity_posture === "mismatch" ? "warn" : null },
          h("td.mono", x.signer_key), h("td", health(x.health_state)), h("td", h("strong", x.identity_posture)),
          h("td.mono", x.observed_signer_address || "—"), h("td.mono", x.expected_signer_address || "—"),
          h("td", x.expected_set_by || "—"), h("td", when(x.last_health_at))))
          : h("tr", h("td.muted", { colspan: 7 }, "no signers")))));
    }
  },
};
