// Kafka consumer groups (/api/kafka/groups): the list with each group's state,
// members and total lag, and one group's partitions (committed offset, log end
// offset, lag, owner) and members (client, host, assignment), as
// kafka-consumer-groups --describe shows them.

import { api, enc } from "./api.js";
import { clear, h, link, num, section, table } from "./dom.js";
import { listPage } from "./pages.js";

const groupHref = (g) => `#/kafka-group/${enc(g.vhost)}/${enc(g.name)}`;
const orDash = (v) => (v === null || v === undefined ? "-" : num(v));
const state = (s) => h("span", { class: `tag state-${s}` }, s);

export const kafka = listPage("Kafka consumer groups", "/api/kafka/groups", () => [
  { title: "Vhost", value: (g) => g.vhost },
  { title: "Group", value: (g) => link(groupHref(g), g.name), cls: "name" },
  { title: "State", value: (g) => state(g.state), cls: "state" },
  { title: "Assignor", value: (g) => g.protocol || "-" },
  { title: "Members", value: (g) => num(g.members.length), num: true, cls: "members" },
  { title: "Partitions", value: (g) => num(g.partitions.length), num: true },
  { title: "Lag", value: (g) => num(g.lag), num: true, cls: "lag" },
], { empty: "No Kafka consumer groups.",
  rowAttrs: (g) => ({ dataset: { group: g.name, vhost: g.vhost, state: g.state } }) });

const assigned = (m) => (m.assignment === null ? "-"
  : m.assignment.map((a) => `${a.topic}[${a.partitions.join(",")}]`).join(" ") || "(none)");

export function kafkaGroup(main, [vhost, name]) {
  const path = `/api/kafka/groups/${enc(vhost)}/${enc(name)}`;
  const head = h("p", { id: "group-summary" });
  const parts = h("div", { id: "group-partitions" });
  const members = h("div", { id: "group-members" });
  clear(main, h("h1", {}, "Kafka consumer group ", h("span", { class: "name" }, name)), head,
    section("Partitions", parts), section("Members", members));
  return async () => {
    const g = await api(path);
    clear(head, state(g.state), ` in vhost ${g.vhost}, generation ${g.generation}, assignor `
      + `${g.protocol || "-"}, total lag `, h("strong", { id: "group-lag" }, num(g.lag)));
    clear(parts, table([
      { title: "Topic", value: (p) => p.topic },
      { title: "Partition", value: (p) => num(p.partition), num: true },
      { title: "Committed offset", value: (p) => (p.committed_offset < 0 ? "-" : num(p.committed_offset)), num: true },
      { title: "Log end offset", value: (p) => orDash(p.log_end_offset), num: true },
      { title: "Lag", value: (p) => orDash(p.lag), num: true, cls: "lag" },
      { title: "Client id", value: (p) => p.client_id ?? "-" },
      { title: "Host", value: (p) => p.client_host ?? "-" },
    ], g.partitions, { empty: "No committed or assigned partitions.",
      rowAttrs: (p) => ({ dataset: { topic: p.topic, partition: p.partition } }) }));
    clear(members, table([
      { title: "Member", value: (m) => m.member_id, cls: "mono" },
      { title: "Client id", value: (m) => m.client_id },
      { title: "Host", value: (m) => m.client_host },
      { title: "Assignment", value: assigned, cls: "assignment" },
    ], g.members, { empty: "No members.", rowAttrs: (m) => ({ dataset: { client: m.client_id } }) }));
  };
}
