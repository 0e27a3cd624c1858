"""Run a one-token graph once per token with an ONNX ``Loop``, for models that loop in Python.

Recurrent models written as a Python loop over time steps (mamba1, RWKV, xLSTM, RecurrentGemma)
trace only at a fixed length. Traced for one token with the cache carried (``trace(...,
one_token=True)``), their graph is one exact decode step; this module wraps it so the model keeps
the causal-LM contract for any number of new tokens:

    for t in range(sequence_length):
        logits[:, t], states = step(input_ids[:, t], attention_mask[:, :past + t + 1],
                                    position_ids[:, t], states)

The step's nodes become the ``Loop`` body, its weights stay initializers of the outer graph (the
body reads them from the outer scope), and its state inputs and outputs become loop-carried values.
"""

from __future__ import annotations

import onnx_ir as ir
import onnxscript

from mobius.tasks.base import TOTAL, TensorSpec


def loop_over_tokens(
    step: ir.Model,
    specs: list[TensorSpec],
    step_specs: list[TensorSpec],
    invariant: set[str] | None = None,
) -> ir.Model:
    """The model that runs ``step`` (traced for one token) over every new token.

    ``specs`` are the contract's inputs with a sequence axis; ``step_specs`` the step's, in the
    same order. Inputs whose sequence axis became 1 are sliced per token; the mask (``TOTAL``)
    grows by one column per token; ``invariant`` ones (an encoder's keys and values) are read
    by every step as they are; the rest (the cache) is carried through the loop.
    """
    invariant = invariant or set()
    old = step.graph
    outer = ir.Graph([], [], nodes=[], opset_imports=dict(old.opset_imports), name=old.name)
    builder = onnxscript.GraphBuilder(outer)
    op = builder.op
    by_name = {v.name: v for v in old.inputs}
    outer_inputs = {
        s.name: builder.input(s.name, by_name[s.name].dtype, ir.Shape(list(s.dims))) for s in specs
    }
    per_token = [
        s.name
        for s, t in zip(specs, step_specs, strict=True)
        if s.dims != t.dims  # the sequence axis (SEQUENCE, or a decoder's own) became 1
    ]
    # the axis each input is cut along: where its sequence axis became 1 (position_ids
    # [3, batch, sequence] for multi-axis rotary: axis 2), and the mask's TOTAL axis
    axes = {
        s.name: next(i for i, (d, e) in enumerate(zip(s.dims, t.dims, strict=True)) if d != e)
        for s, t in zip(specs, step_specs, strict=True)
        if s.name in per_token
    }
    growing = [s.name for s in specs if TOTAL in s.dims]
    axes.update({s.name: list(s.dims).index(TOTAL) for s in specs if s.name in growing})
    carried = [
        s.name
        for s in specs
        if s.name not in per_token and s.name not in growing and s.name not in invariant
    ]
    for name, value in list(old.initializers.items()):  # weights stay in the outer graph
        old.initializers.pop(name)
        outer.register_initializer(value)
    first = per_token[0]
    tokens = op.Shape(outer_inputs[first], start=axes[first], end=axes[first] + 1)
    past = {
        n: op.Sub(op.Shape(outer_inputs[n], start=axes[n], end=axes[n] + 1), tokens)
        for n in growing
    }

    prologue: list[ir.Node] = []

    def node(op_type: str, *inputs: ir.Value, **attributes) -> ir.Value:
        made = ir.node(op_type, inputs=list(inputs), attributes=attributes)
        prologue.append(made)
        return made.outputs[0]

    index = ir.Value(name="token_index", type=ir.TensorType(ir.DataType.INT64), shape=ir.Shape([]))
    condition = ir.Value(name="cond_in", type=ir.TensorType(ir.DataType.BOOL), shape=ir.Shape([]))
    one = node("Constant", value_ints=[1])
    start = node("Reshape", index, one)
    after = node("Add", start, one)
    replacements = {
        name: node(
            "Slice", outer_inputs[name], start, after, node("Constant", value_ints=[axes[name]])
        )
        for name in per_token
    }
    for name in growing:
        zero = node("Constant", value_ints=[0])
        axis = node("Constant", value_ints=[axes[name]])
        replacements[name] = node(
            "Slice", outer_inputs[name], zero, node("Add", past[name], after), axis
        )

    step_nodes = list(old)
    logits, *states = old.outputs
    state_names = [v.name for v in states]
    carried_inputs = [by_name[n] for n in carried]
    old.outputs.clear()
    old.inputs.clear()
    for n in step_nodes:
        old.remove(n)
    for name in invariant & set(by_name):
        replacements[name] = outer_inputs[name]  # read from the outer scope
    for name, value in replacements.items():
        ir.convenience.replace_all_uses_with(by_name[name], value)
    for step_node in step_nodes:  # outer and body values share one namespace (SSA)
        for out in step_node.outputs:
            if out.name:
                out.name = f"token_step.{out.name}"
    epilogue = [
        ir.node("Identity", inputs=[v]) for v in [condition, *states, logits]
    ]  # body outputs must be values of their own
    body = ir.Graph(
        [index, condition, *carried_inputs],
        [e.outputs[0] for e in epilogue],
        nodes=[*prologue, *step_nodes, *epilogue],
        opset_imports=dict(old.opset_imports),
        name="token_step",
    )
    loop = ir.node(
        "Loop",
        inputs=[op.Squeeze(tokens), None, *(outer_inputs[n] for n in carried)],
        attributes={"body": body},
        num_outputs=len(carried) + 1,
    )
    outer.append(loop)
    *finals, stacked = loop.outputs
    # per-token logits stacked as [tokens, batch, 1, vocab] -> [batch, tokens, vocab]
    merged = op.Transpose(op.Squeeze(stacked, op.Constant(value_ints=[2])), perm=[1, 0, 2])
    builder.add_output(merged, "logits")
    for name, value in zip(state_names, finals, strict=True):
        builder.add_output(value, name)
    model = ir.Model(outer, ir_version=step.ir_version, producer_name=step.producer_name)
    model.metadata_props.update(step.metadata_props)
    model.meta.update(step.meta)
    return model
