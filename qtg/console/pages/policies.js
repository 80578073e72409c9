// Treasury policy (docs/policies.md): the active version beside the proposed
// changes; admins propose a version and decide others' (never their own).

import { api } from "../api.js";
import { errorBox, h, json, mount, stateBadge, when } from "../dom.js";

export default {
  path: "policies",
  title: "Policy",
  nav: true,
  async render(main, ctx) {
    const out = h("div#policy-result");
    const r = await api("GET", "/v3/policies", { query: { limit: 20 } });
    if (!r.ok) {
      mount(main, h("h1", "Treasury policy"), errorBox(r));
      return;
    }
    const decide = async (v, verdict) => {
      const d = await api("POST", `/v3/policies/${v.version}/${verdict}`, { body: {} });
      if (d.ok) ctx.refresh();
      else mount(out, errorBox(d));
    };
    const active = r.body.items.find((v) => v.state === "ACTIVE");
    const proposed = r.body.items.filter((v) => v.state === "PROPOSED");
    const column = (v, id) => h(`section.card#${id}`, { dataset: { version: v.version } },
      h("h2", `Version ${v.version} `, stateBadge(v.state)),
      h("p.muted", `proposed by ${v.proposed_by} ${when(v.proposed_at)}`,
        v.decided_by ? ` · decided by ${v.decided_by} ${when(v.decided_at)}` : ""),
      v.note ? h("p", v.note) : null,
      json(v.document),
      ctx.session.may("admin") && v.state === "PROPOSED"
        ? h("div.row",
          h(`button.primary#approve-policy-${v.version}`, { type: "button", onclick: () => decide(v, "approve") }, "approve"),
          h("button.danger", { type: "button", onclick: () => decide(v, "reject") }, "reject"))
        : null);
    const side = h("div.row#policy-versions",
      active ? column(active, "policy-active") : h("section.card#policy-active", h("h2", "No active policy"),
        h("p.muted", "Movements are approved by one operator other than their creator.")),
      ...proposed.map((v) => column(v, `policy-proposed-${v.version}`)));
    mount(main, h("h1", "Treasury policy"), out, side);
    if (ctx.session.may("admin")) main.append(proposeForm(ctx));
  },
};

function proposeForm(ctx) {
  const out = h("div.out");
  const doc = h("textarea#policy-document", {
    rows: 8, required: true,
    placeholder: '{"rules": [{"name": "small", "destination": "book", "action": "allow"}, {"name": "block-all", "action": "block"}]}',
  });
  return h("form.card.create#policy-propose", {
    onsubmit: async (e) => {
      e.preventDefault();
      let parsed;
      try {
        parsed = JSON.parse(doc.value);
      } catch (err) {
        mount(out, h("div.error", { role: "alert" }, `document: not JSON (${err.message})`));
        return;
      }
      const r = await api("POST", "/v3/policies", { body: { document: parsed } });
      if (r.ok) ctx.refresh();
      else mount(out, errorBox(r));
    },
  }, h("h2", "Propose a policy version"), doc, h("button.primary", { type: "submit" }, "Propose"), out);
}
