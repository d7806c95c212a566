"""Models for issue 19 (decisions that know the values), built with onnx.helper and ONNX Runtime's quantizer.

Each stands for a kind of real model that broke when the decisions looked at op types alone:

- :func:`nms_head`: a detector head whose box count changes when the scores are rounded to float16;
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper
from onnx import helper as oh

from tests.graphs import make_model, tensor

#: The score every box of :func:`nms_head` gets in float32: above NMS's threshold of 0.5 by less than float16's
#: spacing there (2^-11), so float16 stores it as 0.5 exactly and NMS drops every box.
NMS_SCORE = 0.5002


def nms_head(boxes: int = 4) -> onnx.ModelProto:
    """feat [1, boxes, 8] -> scores = 0.5002 + 1e-6 * sum(feat) -> NonMaxSuppression -> GatherND of the boxes.

    The boxes are disjoint unit squares, so NMS keeps each box whose score passes the threshold: all of them in
    float32, none once the scores are float16. Outputs: ``selected`` [k, 3] (int64) and ``kept_boxes`` [k, 4].
    """
    corners = np.array([[i * 2.0, 0.0, i * 2.0 + 1.0, 1.0] for i in range(boxes)], np.float32)[None]
    inits = [
        numpy_helper.from_array(corners, "boxes"),
        numpy_helper.from_array(np.full((8, 1), 1e-6, np.float32), "w"),
        numpy_helper.from_array(np.array(NMS_SCORE, np.float32), "bias"),
        numpy_helper.from_array(np.array([boxes], np.int64), "max_out"),
        numpy_helper.from_array(np.array([0.5], np.float32), "iou"),
        numpy_helper.from_array(np.array([0.5], np.float32), "score_threshold"),
        numpy_helper.from_array(np.array([0, 2], np.int64), "batch_box"),
    ]
    nodes = [
        oh.make_node("MatMul", ["feat", "w"], ["logit"], name="score_matmul"),  # [1, boxes, 1]
        oh.make_node("Add", ["logit", "bias"], ["score"], name="score_add"),
        oh.make_node("Transpose", ["score"], ["scores"], name="score_transpose", perm=[0, 2, 1]),  # [1, 1, boxes]
        oh.make_node(
            "NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score_threshold"], ["selected"], name="nms"
        ),
        oh.make_node("Gather", ["selected", "batch_box"], ["picked"], name="pick_columns", axis=1),  # [k, 2]
        oh.make_node("GatherND", ["boxes", "picked"], ["kept_raw"], name="gather_boxes"),  # [k, 4]
        oh.make_node("Mul", ["kept_raw", "iou"], ["kept_boxes"], name="scale_boxes"),
    ]
    return make_model(
        nodes,
        [tensor("feat", TensorProto.FLOAT, [1, boxes, 8])],
        [tensor("selected", TensorProto.INT64, ["k", 3]), tensor("kept_boxes", TensorProto.FLOAT, ["k", 4])],
        inits,
        opset=13,
    )
